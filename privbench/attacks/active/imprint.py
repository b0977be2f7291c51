"""The imprint attack of an active server (Fowl et al., "Robbing the Fed", ICLR 2022).

The server places an *imprint block* in front of the model it sends: ``k`` ReLU bins that all measure
one statistic ``m . x`` of the input (here a fixed random direction in input space) against thresholds
``c_1 < ... < c_k`` at equal-mass quantiles of public data, and a linear layer back to the input whose
columns are one small vector ``v``, added to the input so the rest of the model sees ``x`` nearly
unchanged. Because every bin shares ``v``, a sample's gradient on bin ``i`` is ``g(x) x`` on the weight
row and ``g(x)`` on the bias whenever ``m . x > c_i``, with one scalar ``g(x)`` for every bin. The
difference of two neighbouring rows holds only the samples between their thresholds, so

    x = (dW_i - dW_{i+1}) / (db_i - db_{i+1})

is one input verbatim when it is alone between ``c_i`` and ``c_{i+1}``. Any positive combination of
gradients (a FedAvg update: ``-lr`` times their sum over local steps, or with momentum) keeps the ratio,
up to the bins' drift during local training. With ``k + 1`` equal-mass regions and ``B`` i.i.d.
samples, a sample is isolated with probability ``(1 - 1/(k+1))^(B-1)`` and above ``c_1`` with
``k/(k+1)`` (``expected_fraction``).
"""
from __future__ import annotations

import copy
from typing import Annotated, Any, ClassVar

import torch
from torch import nn

from privbench.attacks.active.base import ActiveAttack
from privbench.attacks.active.isolation import Isolation
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.errors import AttackNotApplicableError
from privbench.schema import Number, PublicImages

#: Names of the imprint block's tensors in the crafted model's state.
BINS_WEIGHT, BINS_BIAS = "imprint.bins.weight", "imprint.bins.bias"
#: The crafted layer (as ``privbench.fl.layers`` names layers): what a learnGene must upload for the read to work.
BLOCK = "imprint.bins"


class ImprintBlock(nn.Module):
    """``x + back(relu(bins(flatten(x))))``, reshaped to ``x``'s shape."""

    def __init__(self, *, features: int, bins: int) -> None:
        super().__init__()
        self.bins = nn.Linear(features, bins)
        self.back = nn.Linear(bins, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.flatten(1)
        return x + self.back(torch.relu(self.bins(flat))).view_as(x)


class Imprinted(nn.Module):
    """The crafted download: the imprint block in front of an unchanged ``model``."""

    def __init__(self, model: nn.Module, *, features: int, bins: int) -> None:
        super().__init__()
        self.imprint = ImprintBlock(features=features, bins=bins)
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(self.imprint(x))


def thresholds(statistic: torch.Tensor, bins: int) -> torch.Tensor:
    """``bins`` thresholds at the ``i / (bins + 1)`` quantiles of ``statistic``: ``bins + 1`` equal-mass regions."""
    levels = torch.arange(1, bins + 1, dtype=torch.float64) / (bins + 1)
    return torch.quantile(statistic.double(), levels).float()


def craft(model: nn.Module, public: torch.Tensor, *, bins: int, seed: int, scale: float = 1e-3,
          gain: float = 1e-2) -> Imprinted:
    """The server's crafted download: ``model`` (a copy) behind an imprint block of ``bins`` bins.

    ``public`` holds images no client has (model input space, ``[M, C, H, W]``); the measurement is ``gain``
    times a unit random direction drawn from ``seed``, the thresholds ``gain`` times its equal-mass quantiles on
    ``public``, and the way back ``scale`` times a random sign vector. Over several local steps the bins drift: the
    way back's columns by about ``lr * gain * |dL/dz| / scale`` of themselves per step and the thresholds by about
    ``lr * scale * |dL/dz|`` against their ``gain``-sized spacing; the defaults were chosen on LeNet updates of 2
    to 20 steps (``docs/protocol.md``, Active server). ``gain`` also keeps the biases small enough that an update's
    change of them is not lost to float32 rounding of the uploaded weights.
    """
    features = int(public[0].numel())
    generator = torch.Generator().manual_seed(seed * 7919 + 101)
    direction = torch.randn(features, generator=generator)
    direction = direction / direction.norm()
    crafted = Imprinted(copy.deepcopy(model), features=features, bins=bins)
    device = next(model.parameters()).device
    cuts = thresholds(public.flatten(1).cpu() @ direction, bins)
    back = scale * torch.sign(torch.randn(features, generator=generator))
    with torch.no_grad():
        crafted.imprint.bins.weight.copy_(gain * direction.expand(bins, features))
        crafted.imprint.bins.bias.copy_(-gain * cuts)
        crafted.imprint.back.weight.copy_(back.view(-1, 1).expand(features, bins))
        crafted.imprint.back.bias.zero_()
    return crafted.to(device)


def bias_steps(bias: torch.Tensor) -> torch.Tensor:
    """Neighbouring bins' bias differences (the last bin's own bias): what each region between two thresholds holds."""
    b = bias.double()
    return b - torch.cat([b[1:], torch.zeros_like(b[:1])])


def read_bins(weight: torch.Tensor, bias: torch.Tensor, *, tolerance: float = 1e-4, floor: float = 0.0
              ) -> torch.Tensor:
    """The inputs isolated by the bins, from the bins' gradient or change (``weight [k, D]``, ``bias [k]``):
    neighbouring rows' differences, divided by their bias difference; regions whose bias difference is at most
    ``tolerance`` times the largest, or at most ``floor`` (a secure sum's rounding), are empty and left out.
    Returns ``[n, D]`` (n <= k).

    Example:
        >>> bias = torch.tensor([3.0, 2.001, 2.0, 1e-3, -1e-3])  # two inputs, rounding elsewhere
        >>> weight = bias.view(-1, 1) * torch.ones(5, 2)
        >>> len(read_bins(weight, bias)), len(read_bins(weight, bias, floor=0.01))
        (5, 2)
    """
    w = weight.double() - torch.cat([weight.double()[1:], torch.zeros_like(weight.double()[:1])])
    b = bias_steps(bias)
    occupied = b.abs() > max(tolerance * float(b.abs().max().clamp(min=1e-300)), floor)
    return (w[occupied] / b[occupied].unsqueeze(1)).float()


def expected_fraction(batch: int, bins: int) -> float:
    """The share of ``batch`` i.i.d. samples alone in one of ``bins`` equal-mass regions above the lowest
    threshold: ``(k/(k+1)) (1 - 1/(k+1))^(B-1)``.

    Example:
        >>> round(expected_fraction(64, 128), 4)
        0.6077
    """
    return bins / (bins + 1) * (1 - 1 / (bins + 1)) ** (batch - 1)


class ImprintAttack(ActiveAttack):
    """The active server's imprint attack: crafts the victim's download, reads its inputs back from the reply.

    Args:
        bins: the imprint block's bins (the most inputs one reply can give away).
        public: how many test-split images the server uses to place the thresholds.
        scale: the size of each entry of the block's way back to the input.
        gain: the size of the bins' measurement direction (and thresholds).
        tolerance: a region is empty when its bias difference is at most this times the largest.
        downloads: ``same`` or ``inconsistent`` (``attacks.active.isolation``: the crafted download to the victim only,
            the others' bins zeroed).
        sybils: cohort members the server controls under secure aggregation.
    """

    name: ClassVar[str] = "imprint"

    def __init__(self, *, bins: Annotated[int, Number(integer=True, low=1, high=10**5)] = 128,
                 public: PublicImages = 1000, scale: Annotated[float, Number(low=0, high=1000, open_low=True)] = 1e-3,
                 gain: Annotated[float, Number(low=0, high=1000, open_low=True)] = 1e-2,
                 tolerance: Annotated[float, Number(low=0, high=1, open_low=True)] = 1e-4, downloads: str = "same",
                 sybils: Annotated[int, Number(integer=True, low=0, high=10**6)] = 0) -> None:
        if bins < 1 or public < 2:
            raise ValueError("attack.bins must be >= 1 and attack.public >= 2")
        if not scale > 0 or not gain > 0 or not tolerance > 0:
            raise ValueError("attack.scale, attack.gain and attack.tolerance must be > 0")
        self.bins, self.public, self.scale, self.gain, self.tolerance = bins, public, scale, gain, tolerance
        self.isolation = Isolation(downloads, sybils)

    def craft(self, model: nn.Module, public: torch.Tensor, *, seed: int, mean: tuple[float, ...] = (),
              std: tuple[float, ...] = ()) -> Imprinted:
        """The download the server sends the victim instead of ``model`` (the bins measure normalised inputs)."""
        return craft(model, public, bins=self.bins, seed=seed, scale=self.scale, gain=self.gain)

    def crafted_layer(self, crafted: nn.Module) -> str:
        """The imprint block's bins."""
        return BLOCK

    def designed_against(self) -> dict[str, str]:
        return {"architecture": "not designed to pass: it adds a block the agreed architecture lacks",
                "aligned_rows": "not designed to pass: its bins share one direction",
                "first_relu_firing": "not designed to pass",
                "cautious_scores": "not designed to pass: it adds tensors (the architecture score)"}

    def describe(self) -> dict[str, Any]:
        """What the server changed, for ``threat_model.json``."""
        return {"server": "active", "changed": "architecture", "crafted": {
            "block": f"imprint (Fowl et al. 2022): {self.bins} ReLU bins on one random direction of the input, "
                     "thresholds at equal-mass quantiles of public data, a linear way back added to the input",
            "bins": self.bins, "public_images": self.public, "scale": self.scale, "gain": self.gain},
            **self.isolation.describe(), "client_checks": self.designed_against(),
            "budget": "analytic (no optimisation): one read of the reply's imprint rows"}

    def attack(self, view: Any, *, seed: int) -> Reconstruction:
        """The inputs read back from the reply's imprint rows (model input space); labels are not inferred."""
        reply = view.observed
        if self.kept_back(view):  # GENE-FL kept the crafted layer back
            return self.nothing("crafted layer not uploaded")
        if BINS_WEIGHT not in reply or BINS_BIAS not in reply:
            raise AttackNotApplicableError(f"{view.knowledge.get('payload')}: the reply carries no imprint rows "
                                           f"({BINS_WEIGHT}, {BINS_BIAS})")
        flat = read_bins(reply[BINS_WEIGHT], reply[BINS_BIAS], tolerance=self.tolerance)
        if not len(flat):
            return self.nothing("empty")
        if not torch.isfinite(flat).all():  # a broken read, not an empty one: its figure stays missing
            return self.nothing("non-finite")
        images = flat.view(len(flat), *view.image_shape)
        log = [{"objective": 0.0, "status": "analytic", "iterations": 0, "evaluations": 0, "occupied": len(flat)}]
        return Reconstruction(log, images=images, labels=torch.full((len(flat),), -1), objective=0.0,
                              label_source="none")
