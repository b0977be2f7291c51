"""Trap weights of an active server (Boenisch et al., "When the Curious Abandon Honesty", EuroS&P 2023).

The server keeps the architecture and sets the weights of its first fully connected ReLU layer (the layer that
sees the flattened input). Each row puts ``-|N(0, sigma^2)|`` on a random half of the inputs and the same
magnitudes times ``scale_factor < 1`` on the other half: on non-negative pixels a row's pre-activation is mostly
negative, so each unit fires for few inputs. A unit fired by one input ``x`` of the batch has weight gradient
``g x`` and bias gradient ``g`` (one scalar ``g``), so

    x = dW_i / db_i

verbatim; as for the imprint, any positive combination of that input's gradients (a FedAvg update) keeps the
ratio, up to the drift of local training. The rows are drawn in pixel space and folded through the run's public
normalisation (``W' = W diag(std)``, ``b' = W mean + mu``), so they see the pixels the paper's rows see. Units
fired by the same single input give the same image; the read keeps one per group (rows within ``same`` of each
other, relative L2).

``fire_rate`` is ours, not the paper's: the server places each row's bias so that it fires on that share of its
public images (the paper tunes ``scale_factor`` to the batch size instead; ``docs/protocol.md``, Active server).
``rows_trapped < 1`` is the server that adapts to a client's firing check: it traps only that share of the rows
and leaves the rest as downloaded, so the layer's mean firing rate stays in the honest range, and it reads only
the rows it trapped.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

import torch
from torch import nn

from privbench.attacks.active.base import ActiveAttack
from privbench.attacks.active.isolation import Isolation
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.errors import AttackNotApplicableError
from privbench.schema import Number, PublicImages


def owned_layers(model: nn.Module) -> list[tuple[str, nn.Module, nn.Module | None]]:
    """``model``'s modules that hold parameters of their own, in order: name, module, and the module after it."""
    named = list(model.named_modules())
    return [(name, module, named[i + 1][1] if i + 1 < len(named) else None) for i, (name, module) in enumerate(named)
            if next(module.parameters(recurse=False), None) is not None]


def relu_layers(model: nn.Module) -> list[str]:
    """The names of ``model``'s ``Linear`` layers that a ``ReLU`` follows, in order, while they follow one another
    from the first parameterised layer (a fully connected ReLU stack on the flattened input)."""
    stack = []
    for name, module, following in owned_layers(model):
        if not isinstance(module, nn.Linear) or not isinstance(following, nn.ReLU):
            break
        stack.append(name)
    return stack


def first_layer(model: nn.Module, features: int | None = None) -> str:
    """The name of ``model``'s first layer when it is a ``Linear`` (on ``features`` inputs, when given) followed by
    a ``ReLU``; refused in one line otherwise."""
    owned = owned_layers(model)
    if not owned:
        raise AttackNotApplicableError(f"attack=trap_weights: {type(model).__name__} has no parameters")
    name, module, following = owned[0]
    if not isinstance(module, nn.Linear) or features not in (None, module.in_features) or \
            not isinstance(following, nn.ReLU):
        raise AttackNotApplicableError(
            f"attack=trap_weights sets the weights of a first fully connected ReLU layer on the flattened input "
            f"(model=mlp); {type(model).__name__}'s first layer {name} is a {type(module).__name__}"
            f"{'' if isinstance(following, nn.ReLU) else ' without a ReLU after it'} (an active server that changes "
            "a CNN's architecture is attack=imprint)")
    return name


def trap_rows(rows: int, features: int, *, sigma: float, scale_factor: float,
              generator: torch.Generator) -> torch.Tensor:
    """``[rows, features]`` trap weights in pixel space: per row, ``-|N(0, sigma^2)|`` on a random half of the
    inputs and the same magnitudes times ``scale_factor`` on the other half.

    Example:
        >>> w = trap_rows(3, 4, sigma=0.5, scale_factor=0.5, generator=torch.Generator().manual_seed(0))
        >>> bool(torch.allclose(w.clamp(min=0).sum(1), -0.5 * w.clamp(max=0).sum(1)))
        True
    """
    half = features // 2
    weights = torch.zeros(rows, features)
    for row in range(rows):
        order = torch.randperm(features, generator=generator)
        magnitude = (torch.randn(half, generator=generator) * sigma).abs()
        weights[row, order[:half]] = -magnitude
        weights[row, order[half:2 * half]] = scale_factor * magnitude
    return weights


def trapped(rows: int, share: float) -> torch.Tensor:
    """The rows a server that traps ``share`` of ``rows`` crafts: the first ``ceil(share * rows)`` of a fixed
    random order (all of them, in order, at 1).

    Example:
        >>> trapped(4, 1.0).tolist(), len(trapped(200, 0.5))
        ([0, 1, 2, 3], 100)
    """
    if share >= 1:
        return torch.arange(rows)
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(7919))
    return order[: max(1, math.ceil(share * rows))].sort().values


def read_rows(weight: torch.Tensor, bias: torch.Tensor, *, tolerance: float, same: float,
              inputs: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[torch.Tensor, list[int]]:
    """Inputs read from a trapped layer's gradient or change (``weight [H, D]``, ``bias [H]``): each row with a
    bias entry above ``tolerance`` times the largest gives ``dW_i / db_i`` (the layer's input; ``inputs`` maps it
    to the model's); reads within ``same`` (relative L2) of an earlier one are the same input. Returns ``[n, D]``,
    largest groups first, and each group's row count."""
    w, b = weight.double(), bias.double()
    fired = (b.abs() > tolerance * b.abs().max().clamp(min=1e-300)).nonzero().flatten()
    fired = fired[torch.argsort(b[fired].abs(), descending=True)]
    reads = w[fired] / b[fired].unsqueeze(1)
    reads = reads[torch.isfinite(reads).all(1)]
    if inputs is not None:
        reads = inputs(reads).double()
    kept = torch.empty_like(reads)
    counts: list[int] = []
    for x in reads:
        n = len(counts)
        match = ((kept[:n] - x).norm(dim=1) <= same * kept[:n].norm(dim=1)).nonzero()
        if len(match):
            counts[int(match[0])] += 1
        else:
            kept[n] = x
            counts.append(1)
    order = sorted(range(len(counts)), key=lambda i: -counts[i])
    return kept[order].float(), [counts[i] for i in order]


class TrapWeightsAttack(ActiveAttack):
    """The active server's trap weights: the architecture unchanged, its first ReLU layer's weights crafted.

    Args:
        sigma: the spread of the trap weights' magnitudes.
        scale_factor: the positive half's magnitudes relative to the negative half's (< 1: rows fire rarely).
        mu: the rows' bias in pixel space (the paper's).
        fire_rate: null for the paper's rows; a share in (0, 1): each row's bias set to fire on that share of the
            public images (ours).
        public: test-split images the server uses for ``fire_rate``.
        tolerance: a row did not fire when its bias entry is at most this times the largest.
        same: rows whose reads are within this relative L2 distance are one input.
        rows_trapped: the share of the layer's rows trapped (the first ones of a fixed random order); the rest keep
            the downloaded weights.
        downloads: ``same`` or ``inconsistent`` (``attacks.active.isolation``: the crafted download to the victim only).
        sybils: cohort members the server controls under secure aggregation.
    """

    name: ClassVar[str] = "trap_weights"
    sparse_rows: ClassVar[bool] = True

    def __init__(self, *, sigma: float = 0.5, scale_factor: float = 0.95, mu: float = 0.0,
                 fire_rate: float | None = None, public: PublicImages = 1000,
                 tolerance: Annotated[float, Number(low=0, high=1, open_low=True)] = 1e-4, same: float = 1e-2,
                 rows_trapped: Annotated[float, Number(low=0, high=1, open_low=True)] = 1.0, downloads: str = "same",
                 sybils: Annotated[int, Number(integer=True, low=0, high=10**6)] = 0) -> None:
        if not sigma > 0 or not 0 < scale_factor <= 1:
            raise ValueError("attack.sigma must be > 0 and attack.scale_factor in (0, 1]")
        if fire_rate is not None and not 0 < fire_rate < 1:
            raise ValueError("attack.fire_rate must be null or in (0, 1)")
        if public < 2 or not tolerance > 0 or not same > 0:
            raise ValueError("attack.public must be >= 2, attack.tolerance and attack.same > 0")
        if not 0 < rows_trapped <= 1:
            raise ValueError(f"attack.rows_trapped must be in (0, 1], not {rows_trapped}")
        self.sigma, self.scale_factor, self.mu, self.fire_rate = sigma, scale_factor, mu, fire_rate
        self.public, self.tolerance, self.same, self.rows_trapped = public, tolerance, same, rows_trapped
        self.isolation = Isolation(downloads, sybils)

    def check_model(self, model: nn.Module, image_shape: tuple[int, ...]) -> None:
        """The model must start with a fully connected ReLU layer on the flattened image."""
        first_layer(model, int(torch.Size(image_shape).numel()))

    def crafted_layer(self, crafted: nn.Module) -> str:
        """The trapped first layer."""
        return first_layer(crafted)

    def crafted_rows(self, crafted: nn.Module) -> torch.Tensor:
        """The trapped rows: the first ``rows_trapped`` share of a fixed random order of the layer's rows."""
        weight = crafted.get_submodule(self.crafted_layer(crafted)).get_parameter("weight")
        return trapped(weight.shape[0], self.rows_trapped)

    def craft(self, model: nn.Module, public: torch.Tensor, *, seed: int, mean: tuple[float, ...],
              std: tuple[float, ...]) -> nn.Module:
        """``model`` (a copy) with trap weights in its first layer, folded through the normalisation."""
        features = int(public[0].numel())
        layer = first_layer(model, features)
        crafted = copy.deepcopy(model)
        linear = crafted.get_submodule(layer)
        assert isinstance(linear, nn.Linear)
        weight, bias = self.rows(public.flatten(1).cpu().float(), linear.out_features, seed=seed, mean=mean, std=std)
        rows = trapped(linear.out_features, self.rows_trapped)
        with torch.no_grad():
            linear.weight[rows] = weight[rows].to(linear.weight)
            linear.bias[rows] = bias[rows].to(linear.bias)
        return crafted

    def rows(self, inputs: torch.Tensor, count: int, *, seed: int, mean: tuple[float, ...],
             std: tuple[float, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """``count`` trap rows on the flattened normalised ``inputs``' space (weights ``[count, D]``, bias): the
        paper's pixel-space rows folded through the normalisation, their bias the paper's or at ``fire_rate``."""
        features = inputs.shape[1]
        generator = torch.Generator().manual_seed(seed * 7919 + 211)
        pixel = trap_rows(count, features, sigma=self.sigma, scale_factor=self.scale_factor, generator=generator)
        per_input = features // len(mean)
        m = torch.tensor(mean, dtype=torch.float32).repeat_interleave(per_input)
        s = torch.tensor(std, dtype=torch.float32).repeat_interleave(per_input)
        weight = pixel * s
        if self.fire_rate is None:
            return weight, pixel @ m + self.mu
        scores = inputs @ weight.T
        return weight, -torch.quantile(scores.double(), 1 - self.fire_rate, dim=0).float()

    def describe(self) -> dict[str, Any]:
        """What the server changed, for ``threat_model.json``."""
        rows = (f"biases at each row's {1 - self.fire_rate:.4g} quantile of public images" if self.fire_rate
                else f"pixel-space bias {self.mu}")
        if self.rows_trapped < 1:
            rows += f"; {self.rows_trapped:.3g} of the rows trapped, the rest as downloaded"
        return {"server": "active", "changed": "weights", "crafted": {
            "block": "trap weights (Boenisch et al. 2023) in the first fully connected ReLU layer, the architecture "
                     f"unchanged: per row -|N(0, {self.sigma}^2)| on half the pixels, {self.scale_factor} times those "
                     f"magnitudes on the other half, {rows}",
            "sigma": self.sigma, "scale_factor": self.scale_factor, "mu": self.mu, "fire_rate": self.fire_rate,
            "public_images": self.public if self.fire_rate else 0, "rows_trapped": self.rows_trapped},
            **self.isolation.describe(), "client_checks": self.designed_against(),
            "budget": "analytic (no optimisation): one read of the reply's trapped rows"}

    def designed_against(self) -> dict[str, str]:
        firing = (f"designed to pass: {self.rows_trapped:.3g} of the rows trapped keep the layer's mean firing rate "
                  "in the honest range" if self.rows_trapped < 1
                  else "not designed to pass: every row trapped fires on few inputs")
        return {"architecture": "designed to pass: the architecture is unchanged",
                "aligned_rows": "designed to pass: each row's signs and magnitudes are drawn at random",
                "first_relu_firing": firing,
                "cautious_scores": "not designed to pass: its rows fire on few inputs (rare_units) with biases far "
                                   "beyond the initialisation's (bias_scale)"}

    def to_inputs(self, reads: torch.Tensor, view: Any) -> torch.Tensor:
        """The flattened model inputs ``[n, D]`` behind the trapped layer's reads (its inputs: here the image)."""
        return reads

    def attack(self, view: Any, *, seed: int) -> Reconstruction:
        """The inputs read back from the reply's trapped rows (model input space); labels are not inferred."""
        if self.kept_back(view):
            return self.nothing("crafted layer not uploaded")
        if self.withheld(view):
            raise AttackNotApplicableError(f"{view.knowledge.get('payload')}: the reply carries no rows of the "
                                           f"trapped layer {view.crafted_layer}")
        layer = view.crafted_layer
        rows = trapped(len(view.observed[f"{layer}.bias"]), self.rows_trapped)
        flat, counts = read_rows(view.observed[f"{layer}.weight"][rows], view.observed[f"{layer}.bias"][rows],
                                 tolerance=self.tolerance, same=self.same, inputs=lambda r: self.to_inputs(r, view))
        if not len(flat):
            return self.nothing("empty")
        images = flat.view(len(flat), *view.image_shape)
        log = [{"objective": 0.0, "status": "analytic", "iterations": 0, "evaluations": 0,
                "fired_rows": sum(counts), "distinct": len(counts), "repeated": sum(c > 1 for c in counts)}]
        return Reconstruction(log, images=images, labels=torch.full((len(flat),), -1), objective=0.0,
                              label_source="none")
