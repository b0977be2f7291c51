"""Trap weights behind a first layer of opposed principal directions, every statistic in the honest range (an active
server that knows the client's scores).

``trap_behind_pca`` passes the three checks a client ships (``defenses.detector.inspect_download``) but not the
scores a cautious client adds (``download_scores``): its always-on first layer fires on every input (``off_centre``
0.5) and its biases sit about a hundred times the initialisation's bound (``bias_scale``); its quiet download zeroes
rows (``dead_rows``). This server follows SEER's principle (Garov et al., ICLR 2024: leave no structure a statistics
test sees) with an analytic construction of ours, not SEER's trained decoder:

- the first layer holds ``k = units // 2`` top principal directions ``u`` of public images twice, as ``+a u`` and
  ``-a u`` on rows in a random order, with the downloaded biases kept and ``a`` the downloaded rows' mean norm. Of a
  pair, one unit fires on almost every input (``a |u.x|`` dwarfs the bias), so the layer fires on half its units and
  ``u.x`` is read back from whichever fired: the layer is invertible on the ``k``-dimensional principal subspace;
- the second layer holds trap rows (``attacks.active.trap_weights``) carried into the pairs' space, each biased to fire
  on ``fire_rate`` of the public images, then scaled down (weights and bias together: the read ``dW / db`` is a ratio
  and does not change) until its bias is no larger than the downloaded layer's largest;
- under model inconsistency the other members' trap rows are *hushed*, not zeroed: their weights' magnitudes made
  negative and their bias negative, inside the same bound; the layer's inputs are ReLU outputs, so a hushed row
  fires on no input at all, and no row is all zeros (it can never fire either: a check for rows with no positive
  weight and a negative bias would see them).

A read recovers the input's projection on the ``k`` principal directions plus the public mean off them (the
2NN's 100 pairs: a median 21.9 dB on Fashion-MNIST; the ceiling is stated in ``docs/protocol.md``).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from privbench.attacks.active.trap_behind_pca import TrapBehindPCAAttack, relu_layers_from_state, sent_digest
from privbench.attacks.active.trap_weights import trapped
from privbench.errors import AttackNotApplicableError

#: The largest share of trapped rows that keeps ``rare_units`` in the honest range (honest 2NNs: 4-10 % rare units in
#: the second layer at initialisation, measured on 64 Fashion-MNIST images).
FEW_ROWS = 0.05
#: The rare-units score's bar this server designs against (``defenses.detector.RARE``; attacks do not import defences).
RARE = 0.05


@dataclass(frozen=True)
class Pairs:
    """What the server keeps of a first layer it sent: the directions ``u`` (``[k, D]``), the rows holding ``+a u``
    and ``-a u``, the scale ``a`` and the public centre (for the component off the directions)."""

    directions: torch.Tensor
    plus: torch.Tensor
    minus: torch.Tensor
    scale: float
    centre: torch.Tensor

    def coordinates(self, hidden: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """``u.x`` per direction from the first layer's outputs ``[n, units]`` and its ``bias`` (as sent): from the
        unit of the pair that fired more (a secure sum's rounding leaves the other one near, not at, 0), or the
        middle of the interval where neither fires when both are at most 0."""
        up, down = hidden[:, self.plus].double(), hidden[:, self.minus].double()
        bias_plus, bias_minus = bias[self.plus].double(), bias[self.minus].double()
        from_up = (up - bias_plus) / self.scale
        from_down = -(down - bias_minus) / self.scale
        middle = ((bias_minus - bias_plus) / (2 * self.scale)).expand_as(up)
        return torch.where(torch.maximum(up, down) <= 0, middle, torch.where(up >= down, from_up, from_down))

    def hidden(self, inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """The first layer's outputs on ``inputs`` (flattened, model input space)."""
        return torch.relu(inputs.double() @ weight.double().T + bias.double())

    def inputs(self, coordinates: torch.Tensor) -> torch.Tensor:
        """The inputs ``[n, D]`` with those coordinates on the directions and the public centre off them."""
        u, c = self.directions, self.centre
        return coordinates @ u + (c - u.T @ (u @ c))


class DisguisedTrapAttack(TrapBehindPCAAttack):
    """Trap weights in the second fully connected ReLU layer behind opposed principal directions in the first, each
    score of ``defenses.detector.download_scores`` kept in the range of the download it replaces.

    Takes ``attacks.active.trap_behind_pca``'s settings (``bound`` is not used: every value stays within the
    downloaded model's own range).
    """

    name: ClassVar[str] = "disguised_trap"
    quieted: ClassVar[str] = "its trap rows hushed: non-positive weights, a negative bias, never firing"

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._pairs: dict[bytes, Pairs] = {}  # the server's memory: per first layer sent

    def check_model(self, model: nn.Module, image_shape: tuple[int, ...]) -> None:
        """Two fully connected ReLU layers from the input; the first's pairs need as many principal directions."""
        features = int(torch.Size(image_shape).numel())
        first = model.get_submodule(self._layers(model, features)[0])
        assert isinstance(first, nn.Linear)
        if first.out_features < 2 or first.out_features // 2 > min(features, self.public - 1):
            raise AttackNotApplicableError(
                f"attack=disguised_trap: the first layer's {first.out_features} units hold "
                f"{first.out_features // 2} pairs of principal directions; {self.public} public images of {features} "
                f"inputs give at most {min(features, self.public - 1)} (raise attack.public), and a pair needs 2 units")

    def craft(self, model: nn.Module, public: torch.Tensor, *, seed: int, mean: tuple[float, ...],
              std: tuple[float, ...]) -> nn.Module:
        """``model`` (a copy) with opposed principal directions in its first layer and scaled trap rows in its
        second."""
        crafted = copy.deepcopy(model)
        inputs = public.flatten(1).cpu().double()
        first_name, second_name = self._layers(crafted, inputs.shape[1])
        first, second = crafted.get_submodule(first_name), crafted.get_submodule(second_name)
        assert isinstance(first, nn.Linear) and isinstance(second, nn.Linear)
        units, k = first.out_features, first.out_features // 2
        centre = inputs.mean(0)
        directions = torch.linalg.svd(inputs - centre, full_matrices=False).Vh[:k]
        order = torch.randperm(units, generator=torch.Generator().manual_seed(seed * 7919 + 401))
        plus, minus = order[:k], order[k:2 * k]
        a = float(first.weight.detach().double().norm(dim=1).mean())
        weight = first.weight.detach().double().clone()
        weight[plus], weight[minus] = a * directions, -a * directions
        bias = first.bias.detach().double()
        pairs = Pairs(directions, plus, minus, a, centre)
        hidden = pairs.hidden(inputs, weight, bias)
        pixel, _ = self.rows(inputs.float(), second.out_features, seed=seed, mean=mean, std=std)
        along = pixel.double() @ directions.T / a  # a trap row on x, read on the pairs: u.x ~ (h+ - h-) / a
        carried = torch.zeros(second.out_features, units, dtype=torch.float64)
        carried[:, plus], carried[:, minus] = along, -along
        fire = -torch.quantile(hidden @ carried.T, 1 - float(self.fire_rate or 0), dim=0)
        limit = 0.99 * float(second.bias.detach().abs().max())
        if not limit > 0:
            raise AttackNotApplicableError(f"attack=disguised_trap keeps its trap rows' biases within the downloaded "
                                           f"{second_name}'s largest, and every bias there is 0")
        shrink = (limit / fire.abs().clamp(min=1e-300)).clamp(max=1.0)
        rows = trapped(second.out_features, self.rows_trapped)
        with torch.no_grad():
            first.weight.copy_(weight.to(first.weight))
            second.weight[rows] = (shrink[:, None] * carried)[rows].to(second.weight)
            second.bias[rows] = (shrink * fire)[rows].to(second.bias)
        self._pairs[sent_digest(first.weight)] = pairs
        return crafted

    def quiet(self, crafted: nn.Module) -> nn.Module:
        """The download a non-victim gets under model inconsistency: each trap row hushed, not zeroed: its weights'
        magnitudes made negative and its bias the layer's largest magnitude, negative. The layer's inputs are ReLU
        outputs (never negative), so a hushed row fires on no input at all; no row is all zeros and every bias stays in
        range."""
        out = copy.deepcopy(crafted)
        second = out.get_submodule(self._layers(out)[1])
        assert isinstance(second, nn.Linear)
        rows = trapped(second.out_features, self.rows_trapped)
        with torch.no_grad():
            second.weight[rows] = -second.weight[rows].abs()
            second.bias[rows] = -second.bias.abs().max()
        return out

    def to_inputs(self, reads: torch.Tensor, view: Any) -> torch.Tensor:
        """The first layer's outputs read from the trap rows, mapped back to inputs through the pairs."""
        first = relu_layers_from_state(view.sent, view.crafted_layer)
        pairs = self._pairs.get(sent_digest(view.sent[f"{first}.weight"]))
        if pairs is None:
            raise AttackNotApplicableError("attack=disguised_trap reads a download this server did not craft (its "
                                           "first layer is not one it sent)")
        bias = view.sent[f"{first}.bias"].to(pairs.directions.device)  # the biases sent, not remembered
        return pairs.inputs(pairs.coordinates(reads.double().to(pairs.directions.device), bias))

    def describe(self) -> dict[str, Any]:
        """What the server changed, for ``threat_model.json``."""
        described = super().describe()
        described["crafted"] = {
            **described["crafted"],
            "block": "trap weights (Boenisch et al. 2023) in the second fully connected ReLU layer, carried through "
                     "a first layer holding the public images' top principal directions twice, as +a u and -a u "
                     "(a the downloaded rows' mean norm, the downloaded biases kept: the layer fires on half its "
                     f"units); rows biased to fire on {self.fire_rate:.4g} of public images, then scaled down "
                     "until no bias exceeds the downloaded layer's largest"
                     + (f"; {self.rows_trapped:.3g} of them trapped" if self.rows_trapped < 1 else ""),
            "first_layer": f"top principal directions of {self.public} public images, opposed in pairs",
            "quiet": "under model inconsistency the others' trap rows are hushed, not zeroed: weights made "
                     "non-positive and a negative bias, so they fire on no input"}
        described["crafted"].pop("bound", None)
        described["budget"] = ("analytic (no optimisation): one read of the reply's trapped second-layer rows, "
                               "inverted through the first layer's pairs")
        return described

    def designed_against(self) -> dict[str, str]:
        return {"architecture": "designed to pass: the architecture is unchanged",
                "aligned_rows": "designed to pass: principal directions are orthogonal (a pair points opposite "
                                "ways), trap rows random",
                "first_relu_firing": "designed to pass: one unit of each pair fires, half the layer",
                "cautious_scores": self._scores()}

    def _scores(self) -> str:
        """What the download does to each cautious score (``defenses.detector.download_scores``)."""
        passed = ("designed to pass every score but drift: first-layer firing at one half, biases within the "
                  "downloaded model's, no dead rows (quiet rows hushed)")
        if self.rows_trapped <= FEW_ROWS and float(self.fire_rate or 0) >= RARE:
            return passed + f"; few rows trapped ({self.rows_trapped:.3g}), each firing on {self.fire_rate:.3g} " \
                            f"of public images, keep rare_units in range"
        return ("not designed to pass: rare_units and drift (its trap rows fire on "
                f"{self.fire_rate:.3g} of public images and {self.rows_trapped:.3g} of the layer is trapped); the "
                "rest it keeps in range: first-layer firing at one half, biases within the downloaded model's, no "
                "dead rows (quiet rows hushed)")
