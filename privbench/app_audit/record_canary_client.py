"""Record-level canaries in a client's DP-SGD, the client's side (``record_canaries`` scores them).

While the host client's train call runs, each step of every Opacus ``DPOptimizer`` its ``PrivacyEngine`` made gets,
beside the batch's per-sample gradients and before Opacus clips them, the gradient of each canary record that joins
the step (Poisson, at the rate the engine's accountant is told): ``scale`` clip norms along the canary's own
direction, times its sign for the round. Opacus clips, sums, noises and steps as it would; which canaries joined
and each step's scale on the model (``lr / batch`` for plain SGD) are noted for the evaluator. These are gradient
canaries (white-box, Nasr et al., USENIX Security 2023): they audit DP-SGD as it runs (its noise, its clip, its
rate), seen through the uploads, not what the app does with its records outside the DP optimizer."""
from __future__ import annotations

import contextlib
import json
import math
import weakref
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privbench.defenses.client_dp.canary_clients import CanaryClients
from privbench.io import atomic_write_text

#: The plan's file in the audit's notes folder.
PLAN = "record-canaries.json"
#: A canary record's gradient is this many clip norms long (past the clip, so that clipping is tested too).
SCALE = 2.0
#: Directions kept in memory at most (canaries x parameters); past it each is drawn again when it joins.
CACHE = 1 << 25
#: Each DP optimizer a ``PrivacyEngine`` made within ``planting`` (an app may keep one across rounds): the names of
#: the parameters of the model it was given, and the rate its accountant is told.
ENGINES: weakref.WeakKeyDictionary[Any, tuple[dict[int, str], float]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class RecordPlan:
    """``count`` canary records in the DP-SGD of the client of partition ``host``, drawn from ``seed``."""

    count: int
    host: int
    seed: int
    scale: float = SCALE

    def write(self, folder: Path) -> None:
        atomic_write_text(folder / PLAN, json.dumps(asdict(self)))

    @staticmethod
    def read(folder: Path) -> RecordPlan | None:
        path = folder / PLAN
        return RecordPlan(**json.loads(path.read_text())) if path.is_file() else None


@dataclass
class Planted:
    """What one train call's canaries did.

    Attributes:
        names, shapes: the DP optimizer's parameters as the app's model names them, in order (the directions' space).
        sample_rate: the engine's, as its accountant is told.
        noise_multipliers, clips: the optimizer's at each step (an Opacus scheduler may move them).
        joined: each canary's number of steps joined.
        weights: each canary's joined steps' scales times their clips, summed: how far it moved the model along its
            direction when clipping works (None where a step is not ``-scale * grad``).
        step_scales: each step's scale on the model (``lr / expected batch``; None where not linear).
        optimizer: the optimizer's class; problem: why no canary rode (one line), else "".
    """

    round: int
    names: list[str] = field(default_factory=list)
    shapes: list[list[int]] = field(default_factory=list)
    sample_rate: float = 0.0
    noise_multipliers: list[float] = field(default_factory=list)
    clips: list[float] = field(default_factory=list)
    joined: list[int] = field(default_factory=list)
    weights: list[float] | None = None
    step_scales: list[float] | None = None
    optimizer: str = ""
    problem: str = ""

    @property
    def steps(self) -> int:
        return len(self.clips)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def linear_scale(optimizer: Any) -> float | None:
    """The factor by which this step moves the model along its noisy clipped sum (``lr / (expected batch x
    accumulated)``), or None where the step is not plain SGD of one learning rate (momentum, weight decay, Adam)."""
    inner = optimizer.original_optimizer
    groups = inner.param_groups
    if type(inner) is not torch.optim.SGD or len({g["lr"] for g in groups}) != 1:
        return None
    if any(g.get("momentum", 0) or g.get("weight_decay", 0) or g.get("maximize", False) for g in groups):
        return None
    mean = optimizer.loss_reduction == "mean"
    divisor = optimizer.expected_batch_size * optimizer.accumulated_iterations if mean else 1
    return float(groups[0]["lr"]) / float(divisor)


class _Host:
    """The canaries of one train call: their directions over the first DP optimizer's parameters that steps."""

    def __init__(self, plan: RecordPlan, round_: int) -> None:
        self.plan, self.planted = plan, Planted(round=round_)
        self.canaries: CanaryClients | None = None
        self.bound: Any = None  # the optimizer they ride in
        self.cache: dict[int, torch.Tensor] = {}
        self.rng = np.random.default_rng([plan.seed, plan.host, round_, 3])

    def direction(self, j: int) -> torch.Tensor:
        assert self.canaries is not None
        if j in self.cache:
            return self.cache[j]
        u = self.canaries.directions(j, j + 1)[0].float()
        if self.plan.count * self.canaries.dims <= CACHE:
            self.cache[j] = u
        return u

    def rides(self, optimizer: Any) -> bool:
        """Whether the canaries ride in this step of ``optimizer`` (the problem noted where they cannot)."""
        p = self.planted
        if p.problem or optimizer not in ENGINES or optimizer._check_skip_next_step(pop_next=False):
            return False
        if self.bound is not None and self.bound is not optimizer:
            p.problem = "a second DP optimizer stepped in the train call; the canaries ride in one"
            return False
        return self.bound is not None or self.first_step(optimizer)

    def first_step(self, optimizer: Any) -> bool:
        """Set the canaries' space from ``optimizer``; False (with the problem noted) where they cannot ride."""
        p = self.planted
        p.optimizer = type(optimizer).__name__
        names, rate = ENGINES[optimizer]
        if any(id(q) not in names for q in optimizer.params):
            p.problem = "a parameter the DP optimizer steps is not one of the model's the engine was given"
            return False
        if not isinstance(optimizer.max_grad_norm, (int, float)):
            p.problem = f"{p.optimizer} clips per layer; the canaries ride in flat clipping only"
            return False
        p.names = [names[id(q)] for q in optimizer.params]
        p.shapes = [list(q.shape) for q in optimizer.params]
        p.sample_rate, p.joined = rate, [0] * self.plan.count
        p.weights, p.step_scales = [0.0] * self.plan.count, []
        self.canaries = CanaryClients(self.plan.count, shapes={n: torch.Size(s) for n, s in zip(p.names, p.shapes)},
                                      seed=self.plan.seed)
        self.bound = optimizer
        return True

    def plant(self, optimizer: Any) -> list[int]:
        """Add the joining canaries' gradients beside the batch's per-sample gradients; the canaries that joined."""
        p = self.planted
        joined = np.flatnonzero(self.rng.random(self.plan.count) < p.sample_rate).tolist()
        if not joined:
            return joined
        assert self.canaries is not None
        signs = torch.tensor([self.canaries.sign(j, p.round) for j in joined])
        clip = float(optimizer.max_grad_norm)
        rows = self.plan.scale * clip * signs[:, None] * torch.stack([self.direction(j) for j in joined])
        at = 0
        for q in optimizer.params:
            size = q.numel()
            last = q.grad_sample[-1] if isinstance(q.grad_sample, list) else q.grad_sample
            piece = rows[:, at:at + size].reshape(len(joined), *q.shape).to(device=last.device, dtype=q.dtype)
            at += size
            if isinstance(q.grad_sample, list):  # accumulated passes: the canaries join the last one
                q.grad_sample[-1] = torch.cat([last, piece])
            else:
                q.grad_sample = torch.cat([last, piece])
        return joined

    def note_step(self, optimizer: Any, joined: list[int]) -> None:
        p = self.planted
        scale, clip = linear_scale(optimizer), float(optimizer.max_grad_norm)
        p.noise_multipliers.append(float(optimizer.noise_multiplier))
        p.clips.append(clip)
        for j in joined:
            p.joined[j] += 1
        if p.weights is None or p.step_scales is None or scale is None:
            p.weights = p.step_scales = None
            return
        p.step_scales.append(scale)
        for j in joined:
            p.weights[j] += scale * clip


@contextlib.contextmanager
def planting(plan: RecordPlan, round_: int) -> Iterator[Planted]:
    """Within the block, every Opacus engine's DP optimizer steps with the plan's canary records beside its batch."""
    from opacus import PrivacyEngine
    from opacus.optimizers import DPOptimizer

    host = _Host(plan, round_)
    made, clip = PrivacyEngine.make_private, DPOptimizer.clip_and_accumulate

    def make_private(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = made(self, *args, **kwargs)
        module, optimizer, loader = result[0], result[1], result[-1]
        names = {id(p): n for n, p in getattr(module, "_module", module).named_parameters()}
        ENGINES[optimizer] = (names, float(getattr(loader, "sample_rate", 0.0) or 1.0 / max(len(loader), 1)))
        return result

    def clip_and_accumulate(self: Any) -> None:
        ride = host.rides(self)
        joined = host.plant(self) if ride else []
        clip(self)
        if ride:
            host.note_step(self, joined)

    PrivacyEngine.make_private = make_private
    DPOptimizer.clip_and_accumulate = clip_and_accumulate
    try:
        yield host.planted
    finally:
        PrivacyEngine.make_private = made
        DPOptimizer.clip_and_accumulate = clip
        if host.planted.steps == 0 and not host.planted.problem:
            host.planted.problem = ("no step of a DP optimizer made by an Opacus PrivacyEngine (make_private) clipped "
                                    "through DPOptimizer's flat clipping (none made, a subclass that clips its own "
                                    "way, or no step)")


def planned_shift(planted: Planted) -> float:
    """Step units a canary moves one round's release by on average: its expected joins (``rate x steps``)."""
    return planted.sample_rate * planted.steps


def unit(planted: Planted) -> float:
    """The release's unit: the clip times the step's scale, over the round's steps (the clip where not linear)."""
    scales = planted.step_scales or [1.0] * planted.steps
    return sum(s * c for s, c in zip(scales, planted.clips)) / max(planted.steps, 1)


def planned_noise(planted: Planted) -> float:
    """The release's noise along a direction, in ``unit``: the root of the steps' squared scale x noise multiplier x
    clip (``z sqrt(steps)`` at a constant learning rate, noise and clip); NaN where the scale is not known."""
    if not planted.step_scales:
        return math.nan
    terms = zip(planted.step_scales, planted.noise_multipliers, planted.clips)
    return math.sqrt(sum((s * z * c) ** 2 for s, z, c in terms)) / unit(planted)
