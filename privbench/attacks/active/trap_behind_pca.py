"""Trap weights one layer deeper, behind a first layer the server makes invertible (an adaptive active server).

A client that checks how often its first ReLU layer fires catches trap weights placed there (Boenisch et al.'s
rows fire rarely by design), and GENE-FL's paper setting keeps the 2NN's first layer home. This server keeps the
architecture and moves the trap: the first fully connected layer becomes the top principal directions ``U`` of
its public images (rows orthonormal), with each unit's bias set to the lowest value its direction takes anywhere in
the pixel box, so the ReLU is always on and the layer is the linear map ``h = U (x - m) + beta``; the second
fully connected ReLU layer holds trap rows (``attacks.active.trap_weights``) drawn in pixel space and carried into ``h``'s
space (``v = w U^T``), each biased to fire on ``fire_rate`` of the public images. A unit of the second layer fired
by one input gives ``h`` verbatim (``dW_i / db_i``). The read is a ratio, so the server scales both layers to keep
every value within ``bound`` (the range a secure aggregation clips to): the first layer sent is ``W = s U``, and
the server inverts it, ``x = W^+ (h - b) + (I - U^T U) m``, the input's projection on the public principal
subspace plus the public mean's component outside it (which the server keeps from its crafting).

Every tensor keeps its name and shape, no rows point the same way, and the first ReLU layer fires on every input,
so the download passes the three checks of ``defenses.detector``. The construction is from a review of this
project's active-server verdicts; it is not a published attack (SEER, Garov et al. ICLR 2024, and LOKI, Zhao et
al. S&P 2024, follow the same principle of leaving no structure a statistics test sees).
"""
from __future__ import annotations

import copy
import hashlib
from typing import Any, ClassVar

import torch
from torch import nn

from privbench.attacks.active.trap_weights import TrapWeightsAttack, relu_layers, trapped
from privbench.errors import AttackNotApplicableError


class TrapBehindPCAAttack(TrapWeightsAttack):
    """Trap weights in the second fully connected ReLU layer, the first made an always-on PCA map.

    Takes ``attacks.active.trap_weights``' settings (``fire_rate`` required: the rows' biases are placed on public images)
    and reads what those would read, mapped back through the first layer.
    """

    name: ClassVar[str] = "trap_behind_pca"

    def __init__(self, *, fire_rate: float | None = 0.01, bound: float = 4.0, **settings: Any) -> None:
        if fire_rate is None:
            raise ValueError("attack=trap_behind_pca places its rows' biases on public images: set attack.fire_rate "
                             "in (0, 1)")
        if not bound > 0:
            raise ValueError(f"attack.bound must be > 0, not {bound}")
        super().__init__(fire_rate=fire_rate, **settings)
        self.bound = bound
        self._outside: dict[bytes, torch.Tensor] = {}  # the server's memory: per first layer sent, (I - P) m

    def _layers(self, model: nn.Module, features: int | None = None) -> tuple[str, str]:
        stack = relu_layers(model)
        first = model.get_submodule(stack[0]) if stack else None
        if len(stack) < 2 or not isinstance(first, nn.Linear) or features not in (None, first.in_features):
            raise AttackNotApplicableError(
                f"attack={self.name} traps the second fully connected ReLU layer behind the first (model=mlp with "
                f"at least two hidden layers); {type(model).__name__} has {len(stack)} fully connected ReLU "
                "layer(s) from its input")
        return stack[0], stack[1]

    def check_model(self, model: nn.Module, image_shape: tuple[int, ...]) -> None:
        """The model must start with two fully connected ReLU layers, the first no wider than the public set
        allows (its rows are that many principal directions)."""
        features = int(torch.Size(image_shape).numel())
        first = model.get_submodule(self._layers(model, features)[0])
        assert isinstance(first, nn.Linear)
        if first.out_features > min(features, self.public - 1):
            raise AttackNotApplicableError(
                f"attack=trap_behind_pca: the first layer's {first.out_features} units need as many principal "
                f"directions, and {self.public} public images of {features} inputs give at most "
                f"{min(features, self.public - 1)} (raise attack.public)")

    def crafted_layer(self, crafted: nn.Module) -> str:
        """The trapped second layer."""
        return self._layers(crafted)[1]

    def craft(self, model: nn.Module, public: torch.Tensor, *, seed: int, mean: tuple[float, ...],
              std: tuple[float, ...]) -> nn.Module:
        """``model`` (a copy) with an always-on PCA first layer and trap rows in its second."""
        crafted = copy.deepcopy(model)
        inputs = public.flatten(1).cpu().double()
        first_name, second_name = self._layers(crafted, inputs.shape[1])
        first, second = crafted.get_submodule(first_name), crafted.get_submodule(second_name)
        assert isinstance(first, nn.Linear) and isinstance(second, nn.Linear)
        centre = inputs.mean(0)
        directions = torch.linalg.svd(inputs - centre, full_matrices=False).Vh[: first.out_features]
        per_input = inputs.shape[1] // len(mean)
        m = torch.tensor(mean, dtype=torch.float64).repeat_interleave(per_input)
        s = torch.tensor(std, dtype=torch.float64).repeat_interleave(per_input)
        low, high = (0 - m) / s - centre, (1 - m) / s - centre  # the pixel box around the public mean
        lowest = torch.minimum(directions * low, directions * high).sum(1)
        beta = -lowest + 1e-3 * lowest.abs().clamp(min=1.0)
        first_bias = beta - directions @ centre
        scale = min(1.0, self.bound / float(first_bias.abs().max()))  # every value within +/-bound (scale-free reads)
        hidden = scale * ((inputs - centre) @ directions.T + beta)
        weight, _ = self.rows(inputs.float(), second.out_features, seed=seed, mean=mean, std=std)
        carried = weight.double() @ directions.T
        scores = hidden @ carried.T
        bias = -torch.quantile(scores, 1 - float(self.fire_rate or 0), dim=0)
        shrink = min(1.0, self.bound / max(float(carried.abs().max()), float(bias.abs().max())))
        carried, bias = shrink * carried, shrink * bias
        rows = trapped(second.out_features, self.rows_trapped)
        with torch.no_grad():
            first.weight.copy_((scale * directions).to(first.weight))
            first.bias.copy_((scale * first_bias).to(first.bias))
            second.weight[rows] = carried[rows].to(second.weight)
            second.bias[rows] = bias[rows].to(second.bias)
        self._outside[sent_digest(first.weight)] = (centre - directions.T @ (directions @ centre)).float()
        return crafted

    def to_inputs(self, reads: torch.Tensor, view: Any) -> torch.Tensor:
        """The first layer (``W = s U``) inverted on the reads (its outputs): ``W^+ (h - b)``, least squares on the
        weights sent, plus the public mean off ``U``, which the server kept when it crafted that layer."""
        first = relu_layers_from_state(view.sent, view.crafted_layer)
        weight, bias = view.sent[f"{first}.weight"].double(), view.sent[f"{first}.bias"].double()
        outside = self._outside.get(sent_digest(view.sent[f"{first}.weight"]))
        if outside is None:
            raise AttackNotApplicableError("attack=trap_behind_pca reads a download this server did not craft (its "
                                           "first layer is not one it sent)")
        flat = torch.linalg.lstsq(weight, (reads.double() - bias).T).solution.T
        return flat + outside.double().to(flat.device)

    def describe(self) -> dict[str, Any]:
        """What the server changed, for ``threat_model.json``."""
        described = super().describe()
        described["crafted"].pop("mu", None)  # the rows' biases are placed on public images here
        described["crafted"] = {
            **described["crafted"],
            "block": "trap weights (Boenisch et al. 2023) in the second fully connected ReLU layer, carried through "
                     "a first layer set to the public images' principal directions with its ReLU always on; the "
                     f"architecture unchanged; rows biased to fire on {self.fire_rate:.4g} of public images"
                     + (f", {self.rows_trapped:.3g} of them trapped" if self.rows_trapped < 1 else ""),
            "first_layer": f"top principal directions of {self.public} public images, bias at each direction's "
                           "lowest value over the pixel box (always on)",
            "bound": f"both layers scaled to hold values within +/-{self.bound} (a secure aggregation's range)"}
        described["budget"] = ("analytic (no optimisation): one read of the reply's trapped second-layer rows, "
                               "inverted through the first layer")
        return described

    def designed_against(self) -> dict[str, str]:
        return {"architecture": "designed to pass: the architecture is unchanged",
                "aligned_rows": "designed to pass: principal directions are orthogonal, trap rows random",
                "first_relu_firing": "designed to pass: the first layer's ReLU is always on",
                "cautious_scores": "not designed to pass: its first layer fires on every input (off_centre), its "
                                   "biases are scaled far beyond the initialisation's (bias_scale)"}


def sent_digest(weight: torch.Tensor) -> bytes:
    """The digest of a first layer's weights, by which the server recalls what it sent."""
    return hashlib.sha256(weight.detach().cpu().float().contiguous().numpy().tobytes()).digest()


def relu_layers_from_state(state: dict[str, torch.Tensor], second: str) -> str:
    """The first layer's name in a fully connected stack whose second layer is ``second``, from a state dict: the
    two-dimensional weight before ``second``'s in the state's order."""
    names = [n.removesuffix(".weight") for n, t in state.items() if n.endswith(".weight") and t.dim() == 2]
    if second not in names or names.index(second) == 0:
        raise AttackNotApplicableError(f"attack=trap_behind_pca: no fully connected layer before {second}")
    return names[names.index(second) - 1]
