"""Noise multiplier for a client's whole schedule of Gaussian releases, calibrated to a target epsilon."""
from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence

from privbench.errors import ConfigError
from privbench.fl.reads import AUDIT_GRADIENT, LOCAL_SGD, PlannedRead

#: One accounting event: ``(sample_rate, steps)`` of a (subsampled) Gaussian mechanism.
Event = tuple[float, int]


def poisson_steps(batches: int) -> int:
    """Steps per epoch of Opacus' Poisson loader for a loader of ``batches`` batches: ``int(1 / (1 / batches))``,
    as ``DPDataLoader.from_data_loader`` and ``UniformWithReplacementSampler`` compute it, one fewer than
    ``batches`` where the float rounds down (93, 99, 105, ...); 0 for no batches.

    Example:
        >>> [poisson_steps(k) for k in (92, 93, 99, 100)]
        [92, 92, 98, 100]
    """
    return int(1 / (1 / batches)) if batches > 0 else 0


def events(reads: Iterable[PlannedRead], *, covered: Iterable[str] = ()) -> list[Event]:
    """The accounting events of ``reads``: what the accountant will step for them.

    Local SGD with Poisson sampling takes ``s = poisson_steps(ceil(n / B))`` steps per epoch, which Opacus'
    accountant records at sample rate ``1 / s`` (``make_private``: one over the DP loader's length). The audit
    gradient is a step on a fixed batch, so it gets no amplification by sampling (rate 1). Reads named in ``covered``
    (the Fisher pass, the subspace) are one whole-data Gaussian release each (rate 1);
    other reads release no accounted mechanism and add no event. Events of equal rate
    are merged (composition only adds their steps).

    Example:
        >>> events([PlannedRead("local_sgd", 100, 32, 2), PlannedRead("audit_gradient", 1)])
        [(0.25, 8), (1.0, 1)]
    """
    covered = set(covered)
    steps: dict[float, int] = {}  # events of one sample rate compose into one entry
    for read in reads:
        if read.what == LOCAL_SGD:
            per_epoch = poisson_steps(read.batches)
            if per_epoch == 0:
                continue
            rate, count = 1.0 / per_epoch, read.epochs * per_epoch
        elif read.what == AUDIT_GRADIENT or read.what in covered:
            rate, count = 1.0, 1
        else:
            continue
        steps[rate] = steps.get(rate, 0) + count
    return list(steps.items())


def steps_by_rate(schedule: Iterable[Event]) -> dict[float, int]:
    """Steps per sample rate (composition only adds the steps of one rate).

    Example:
        >>> steps_by_rate([(0.25, 4), (1.0, 1), (0.25, 4)])
        {0.25: 8, 1.0: 1}
    """
    out: dict[float, int] = {}
    for rate, steps in schedule:
        out[rate] = out.get(rate, 0) + steps
    return out


def shown(schedule: dict[float, int]) -> str:
    """A schedule in words, e.g. ``8 steps at rate 0.25``."""
    return ", ".join(f"{steps} steps at rate {rate:.6g}" for rate, steps in sorted(schedule.items())) or "no steps"


def epsilon(sigma: float, schedule: Sequence[Event], *, delta: float, accountant: str = "rdp") -> float:
    """Epsilon at ``delta`` after every event of ``schedule`` with noise multiplier ``sigma``."""
    from opacus.accountants import create_accountant

    if not schedule:
        return 0.0
    acc = create_accountant(mechanism=accountant)
    acc.history = [(sigma, q, steps) for q, steps in schedule]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Optimal order")  # a valid (if loose) bound at large epsilon
        return float(acc.get_epsilon(delta=delta))


def noise_multiplier(schedule: Sequence[Event], *, target_epsilon: float, delta: float, accountant: str = "rdp",
                     tolerance: float = 0.02) -> float:
    """The smallest sigma (within ``tolerance`` of the target's epsilon) whose schedule spends at most the target.

    Bisection on sigma; the result spends between ``(1 - tolerance) * target`` and ``target``.

    Example:
        >>> s = noise_multiplier([(0.25, 40)], target_epsilon=4.0, delta=1e-5)
        >>> 0.98 * 4.0 <= epsilon(s, [(0.25, 40)], delta=1e-5) <= 4.0
        True
    """
    if not schedule:
        return 0.0
    low, high = 0.0, 1.0
    while epsilon(high, schedule, delta=delta, accountant=accountant) > target_epsilon:
        low, high = high, 2 * high
        if high > 1e4:
            raise ConfigError(f"defense.target_epsilon={target_epsilon} needs a noise multiplier above 1e4")
    for _ in range(60):
        eps = epsilon(high, schedule, delta=delta, accountant=accountant)
        if eps >= (1 - tolerance) * target_epsilon or math.isclose(low, high):
            break
        mid = (low + high) / 2
        if mid == 0 or epsilon(mid, schedule, delta=delta, accountant=accountant) > target_epsilon:
            low = mid
        else:
            high = mid
    return high
