"""LOKI (Zhao et al., "LOKI: Large-scale Data Reconstruction Attack against Federated Learning through Model
Manipulation", S&P 2024): per-client convolutional kernels that keep a cohort's members apart inside a secure sum.

The server places a *LOKI block* in front of the model it sends: a convolution with one slot of ``C`` output
channels per cohort member, a fully connected layer of ``k`` ReLU bins per slot that reads only its slot's
channels, and a linear way back to the input (as in Fowl et al.'s imprint block, ``imprint.py``). Every member gets
the same bins and way back; only the convolution differs: member ``s``'s download has identity kernels in slot
``s`` (each channel's kernel is one centre tap, scaled and shifted so that the slot holds the member's raw pixels
in [0, 1]) and zero kernels in every other slot. The other slots then hold 0, so their bins, whose weights are all
positive and whose thresholds are positive, never fire for this member, and their rows never move. In the
cohort's secure sum slot ``s``'s bins carry member ``s``'s change alone, scaled by its unknown weight, which the
imprint read ``x = (dW_i - dW_{i+1}) / (db_i - db_{i+1})`` cancels: every image isolated in its member's bins is
read verbatim, and attributed to the member that slot was sent to.

The block has one slot more than ``attack.slots``, sent to nobody: its bins hold only what the secure sum's rounding
put there, the measure of which regions of the members' slots are empty. The bins measure a slot's average pixel
intensity (LOKI's statistic) against thresholds at equal-mass quantiles of public images. With ``k + 1`` regions and ``B`` images a member, an image is read with probability
``(k/(k+1)) (1 - 1/(k+1))^(B-1)`` (``imprint.expected_fraction``).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

import torch
from torch import nn

from privbench.attacks.active.base import ActiveAttack
from privbench.attacks.active.imprint import bias_steps, read_bins, thresholds
from privbench.attacks.active.isolation import Isolation
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.errors import AttackNotApplicableError
from privbench.schema import Number, PublicImages

#: The crafted layer (as ``privbench.fl.layers`` names layers) and its tensors in the crafted model's state.
BLOCK = "loki.bins"
BINS_WEIGHT, BINS_BIAS, KERNELS = "loki.bins.weight", "loki.bins.bias", "loki.conv.weight"


class SlotBins(nn.Module):
    """``slots`` groups of ``bins`` linear units; group ``s`` reads only slot ``s`` of its input ``[B, slots, D]``.
    The weight is kept as ``[slots * bins, D]`` (group ``s``'s rows are ``s * bins`` to ``(s + 1) * bins - 1``)."""

    def __init__(self, *, slots: int, bins: int, features: int) -> None:
        super().__init__()
        self.slots, self.bins = slots, bins
        self.weight = nn.Parameter(torch.zeros(slots * bins, features))
        self.bias = nn.Parameter(torch.zeros(slots * bins))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        w = self.weight.view(self.slots, self.bins, -1)
        return torch.einsum("bsd,skd->bsk", h, w).flatten(1) + self.bias


class LokiBlock(nn.Module):
    """``x + back(relu(bins(relu(conv(x)))))``: the convolution's slots, each slot's bins, the way back."""

    def __init__(self, *, channels: int, height: int, width: int, slots: int, bins: int) -> None:
        super().__init__()
        self.slots, features = slots, channels * height * width
        self.conv = nn.Conv2d(channels, slots * channels, kernel_size=3, padding=1)
        self.bins = SlotBins(slots=slots, bins=bins, features=features)
        self.back = nn.Linear(slots * bins, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x)).view(len(x), self.slots, -1)
        return x + self.back(torch.relu(self.bins(h))).view_as(x)


class Lokied(nn.Module):
    """The crafted download: the LOKI block in front of an unchanged ``model``."""

    def __init__(self, model: nn.Module, *, shape: tuple[int, int, int], slots: int, bins: int) -> None:
        super().__init__()
        self.loki = LokiBlock(channels=shape[0], height=shape[1], width=shape[2], slots=slots, bins=bins)
        self.model = model
        self.normalisation: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())  # the server's, for for_slot

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(self.loki(x))


def craft(model: nn.Module, public: torch.Tensor, *, slots: int, bins: int, mean: tuple[float, ...],
          std: tuple[float, ...], seed: int, scale: float, gain: float) -> Lokied:
    """The block every member shares (``model`` behind it, a copy), every slot's kernels still zero (``for_slot``
    gives member ``s`` its own). ``public`` holds normalised images no client has (``[M, C, H, W]``); the bins
    measure ``gain`` times a slot's average raw pixel intensity, their thresholds ``gain`` times its equal-mass
    quantiles on ``public``; the way back is ``scale`` times a random sign vector drawn from ``seed``."""
    shape = tuple(int(d) for d in public.shape[1:])
    assert len(shape) == 3
    if not len(mean) == len(std) == shape[0]:
        raise AttackNotApplicableError(f"attack=loki: {shape[0]} input channels but a normalisation of "
                                       f"{len(mean)} means and {len(std)} standard deviations")
    crafted = Lokied(copy.deepcopy(model), shape=(shape[0], shape[1], shape[2]), slots=slots, bins=bins)
    raw = public.cpu().double() * torch.tensor(std).view(1, -1, 1, 1) + torch.tensor(mean).view(1, -1, 1, 1)
    intensity = raw.flatten(1).mean(1)
    if not bool((intensity > 0).all()):
        raise AttackNotApplicableError("attack=loki: a public image has no positive pixel, so a slot's thresholds "
                                       "cannot all be positive")
    cuts = thresholds(intensity, bins)
    features = int(public[0].numel())
    generator = torch.Generator().manual_seed(seed * 7919 + 211)
    back = scale * torch.sign(torch.randn(features, generator=generator))
    crafted.normalisation = (tuple(mean), tuple(std))
    with torch.no_grad():
        block = crafted.loki
        _zero_kernels(block.conv)
        block.bins.weight.fill_(gain / features)
        block.bins.bias.copy_((-gain * cuts).repeat(slots))
        block.back.weight.copy_(back.view(-1, 1).expand(features, slots * bins))
        block.back.bias.zero_()
    return crafted.to(next(model.parameters()).device)


def _zero_kernels(conv: nn.Conv2d) -> None:
    """Every slot's kernels and biases to zero (no slot holds anything)."""
    with torch.no_grad():
        conv.weight.zero_()
        if conv.bias is not None:
            conv.bias.zero_()


def for_slot(crafted: Lokied, slot: int, *, mean: tuple[float, ...], std: tuple[float, ...]) -> Lokied:
    """A copy of ``crafted`` whose slot ``slot`` maps the input to raw pixels: channel ``c``'s kernel is a centre
    tap of ``std[c]`` and its bias ``mean[c]`` (undoing the normalisation); the other slots stay zero.

    Example:
        >>> block = Lokied(nn.Identity(), shape=(1, 2, 2), slots=2, bins=1)
        >>> _ = nn.init.zeros_(block.loki.conv.weight), nn.init.zeros_(block.loki.conv.bias)
        >>> x = torch.full((1, 1, 2, 2), 0.5)
        >>> h = torch.relu(for_slot(block, 1, mean=(0.5,), std=(2.0,)).loki.conv(x))
        >>> h[0, 0].abs().sum().item(), h[0, 1].tolist()
        (0.0, [[1.5, 1.5], [1.5, 1.5]])
    """
    out = copy.deepcopy(crafted)
    conv, channels = out.loki.conv, len(std)
    if not 0 <= slot < out.loki.slots:
        raise AttackNotApplicableError(f"attack=loki: slot {slot} of a block with {out.loki.slots} slots")
    bias = conv.bias
    assert bias is not None
    with torch.no_grad():
        conv.weight[slot * channels: (slot + 1) * channels] = 0
        for c in range(channels):
            conv.weight[slot * channels + c, c, 1, 1] = std[c]
            bias[slot * channels + c] = mean[c]
    return out


class LokiAttack(ActiveAttack):
    """LOKI's per-client kernels: each member of the cohort gets its own slot, the server reads every slot.

    Args:
        slots: the block's member slots (the most cohort members it keeps apart; at least ``fl.participants``);
            the block has one more, sent to nobody (the sentinel that measures the secure sum's rounding).
        bins: bins per slot (the most images one member can give away).
        public: test-split images the server uses to place the thresholds.
        scale: the size of each entry of the block's way back to the input.
        gain: the size of the bins' measurement (and thresholds).
        tolerance: a region is empty when its bias difference is at most this times the largest of its slot.
        noise: ... or when it is within this many robust standard deviations of zero (1.4826 times the median
            absolute bias difference of the sentinel slot's regions, which no member fires: a secure sum's rounding;
            0: off).
    """

    name: ClassVar[str] = "loki"
    per_member: ClassVar[bool] = True

    def __init__(self, *, slots: Annotated[int, Number(integer=True, low=1, high=10**4)] = 20,
                 bins: Annotated[int, Number(integer=True, low=1, high=10**5)] = 64, public: PublicImages = 1000,
                 scale: Annotated[float, Number(low=0, high=1000, open_low=True)] = 1.0,
                 gain: Annotated[float, Number(low=0, high=1000, open_low=True)] = 1e-2,
                 tolerance: Annotated[float, Number(low=0, high=1, open_low=True)] = 1e-4,
                 noise: Annotated[float, Number(low=0, high=1000)] = 6.0) -> None:
        if slots < 1 or bins < 1 or public < 2:
            raise ValueError("attack.slots and attack.bins must be >= 1 and attack.public >= 2")
        if not scale > 0 or not gain > 0 or not tolerance > 0 or not noise >= 0:
            raise ValueError("attack.scale, attack.gain and attack.tolerance must be > 0, attack.noise >= 0")
        self.slots, self.bins, self.public = slots, bins, public
        self.scale, self.gain, self.tolerance, self.noise = scale, gain, tolerance, noise
        self.isolation = Isolation("per_client")

    def craft(self, model: nn.Module, public: torch.Tensor, *, seed: int, mean: tuple[float, ...] = (),
              std: tuple[float, ...] = ()) -> nn.Module:
        """The victim's download (slot 0); ``member_downloads`` gives a cohort theirs."""
        shared = craft(model, public, slots=self.slots + 1, bins=self.bins, mean=mean, std=std, seed=seed,
                       scale=self.scale, gain=self.gain)
        return for_slot(shared, 0, mean=mean, std=std)

    def member_downloads(self, crafted: nn.Module, count: int) -> list[nn.Module] | None:
        """Member ``i`` of the cohort (in cohort order) gets slot ``i``; the sentinel slot goes to nobody."""
        if count > self.slots:
            raise AttackNotApplicableError(f"attack.slots={self.slots}: the cohort has {count} members")
        assert isinstance(crafted, Lokied)
        mean, std = crafted.normalisation
        shared = copy.deepcopy(crafted)
        _zero_kernels(shared.loki.conv)
        return [for_slot(shared, i, mean=mean, std=std) for i in range(count)]

    def crafted_layer(self, crafted: nn.Module) -> str:
        """The block's bins."""
        return BLOCK

    def describe(self) -> dict[str, Any]:
        """What the server changed, for ``threat_model.json``."""
        return {"server": "active", "changed": "architecture", "crafted": {
            "block": f"LOKI (Zhao et al. 2024): a 3x3 convolution with {self.slots} member slots and a sentinel, "
                     "each member's download "
                     f"identity kernels in its own slot; {self.bins} ReLU bins a slot on its average pixel "
                     "intensity, thresholds at equal-mass quantiles of public data; a linear way back to the input",
            "slots": self.slots, "bins": self.bins, "public_images": self.public, "scale": self.scale,
            "gain": self.gain}, **self.isolation.describe(), "client_checks": self.designed_against(),
            "budget": "analytic (no optimisation): one read of each slot's bins"}

    def designed_against(self) -> dict[str, str]:
        return {"architecture": "not designed to pass: it adds a block the agreed architecture lacks",
                "aligned_rows": "not designed to pass: a slot's bins share one direction",
                "first_relu_firing": "not designed to pass",
                "cautious_scores": "not designed to pass: it adds tensors (the architecture score)"}

    def nothing(self, status: str) -> Attributed:
        """A read that gave no image: nothing attributed either (0, where the view knows the members)."""
        return Attributed([{"objective": float("nan"), "status": status, "iterations": 0, "evaluations": 0}],
                          label_source="none")

    def attack(self, view: Any, *, seed: int) -> Reconstruction:
        """Each slot's images, read from its bins (raw pixels), attributed to the member the slot was sent to."""
        reply = view.observed
        if self.kept_back(view):
            return self.nothing("crafted layer not uploaded")
        if BINS_WEIGHT not in reply or BINS_BIAS not in reply:
            raise AttackNotApplicableError(f"{view.knowledge.get('payload')}: the reply carries no LOKI bins "
                                           f"({BINS_WEIGHT}, {BINS_BIAS})")
        owners = view.knowledge.get("downloads", {}).get("slots") or {"victim": 0}
        weight, bias = reply[BINS_WEIGHT], reply[BINS_BIAS]
        if bias.numel() != (self.slots + 1) * self.bins or weight.shape[0] != bias.numel():
            raise AttackNotApplicableError(f"the reply's LOKI bins have {bias.numel()} rows, not the "
                                           f"{(self.slots + 1) * self.bins} of {self.slots} slots, a sentinel and "
                                           f"{self.bins} bins each")
        sentinel = bias_steps(bias[self.slots * self.bins:])  # no member fires it: the rounding alone
        floor = self.noise * 1.4826 * float(sentinel.abs().median())
        images, sources = [], []
        for member, slot in owners.items():
            rows = slice(slot * self.bins, (slot + 1) * self.bins)
            if not bool(bias[rows].abs().max() > 0):
                continue  # the slot's member fired no bin
            flat = read_bins(weight[rows], bias[rows], tolerance=self.tolerance, floor=floor)
            flat = flat[torch.isfinite(flat).all(1)]
            images.append(flat.view(len(flat), *view.image_shape))
            sources += [member] * len(flat)
        if not sources:
            return self.nothing("empty")
        log = [{"objective": 0.0, "status": "analytic", "iterations": 0, "evaluations": 0, "occupied": len(sources)}]
        return Attributed(log, images=torch.cat(images), labels=torch.full((len(sources),), -1), objective=0.0,
                          label_source="none", pixels=True, sources=sources)


@dataclass
class Attributed(Reconstruction):
    """Images each read from one member's share of a secure sum: ``sources[i]`` names the member image ``i`` was
    attributed to."""

    sources: list[str] = field(default_factory=list)
