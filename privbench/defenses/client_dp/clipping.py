"""Per-client clipping of a model update, fixed or adaptive (quantile clipping, Andrew et al., NeurIPS 2021)."""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from privbench.errors import ConfigError

State = dict[str, torch.Tensor]


def change_from(tensors: State, base: State) -> State:
    """A client's update: each floating tensor it sends less the model it received."""
    return {n: t - base[n] for n, t in tensors.items() if n in base and t.is_floating_point()}


def update_norm(change: State) -> float:
    """The L2 norm of an update over all its floating tensors (float64).

    Example:
        >>> update_norm({"a": torch.tensor([3.0]), "b": torch.tensor([4.0]), "n": torch.tensor([7])})
        5.0
    """
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in change.values() if t.is_floating_point()))


def clip(change: State, bound: float, *, skip: Sequence[str] = ()) -> tuple[State, float]:
    """``change`` scaled to L2 norm at most ``bound`` (flat clipping over every floating tensor), and its norm
    before clipping. ``skip`` names tensors left unclipped: a broken mechanism for the audit to catch, never a
    setting.

    Example:
        >>> out, norm = clip({"a": torch.tensor([3.0, 4.0])}, 1.0)
        >>> norm, out["a"].tolist()
        (5.0, [0.6000000238418579, 0.800000011920929])
    """
    norm = update_norm({n: t for n, t in change.items() if n not in skip})
    factor = min(1.0, bound / norm) if norm > 0 else 1.0
    return {n: t if (n in skip or not t.is_floating_point()) else t * factor for n, t in change.items()}, norm


def split_noise(noise_multiplier: float, count_stddev: float) -> float:
    """The update's noise multiplier when the clipped-count estimate also spends privacy (Andrew et al. 2021,
    Theorem 1): ``(z^-2 - (2 sigma_b)^-2)^(-1/2)``, so that both releases together are one Gaussian release at
    ``z``. Requires ``z < 2 sigma_b``.

    Example:
        >>> round(split_noise(1.0, 5.0), 4)
        1.005
    """
    if noise_multiplier <= 0:
        return 0.0
    if not noise_multiplier < 2 * count_stddev:
        raise ConfigError(f"aggregation.clipped_count_stddev={count_stddev:g} must exceed half the noise multiplier "
                          f"({noise_multiplier / 2:g}): the clip estimate would spend the whole budget")
    return (noise_multiplier ** -2 - (2 * count_stddev) ** -2) ** -0.5


class QuantileClip:
    """Adaptive clipping: after each round the bound moves geometrically toward the ``target`` quantile of the
    update norms, ``C <- C exp(-lr (b - target))``, ``b`` the noisy share of updates left unclipped, estimated as
    Andrew et al. do: ``(sum(b_i - 1/2) + sigma_b N(0, 1)) / m + 1/2`` over the round's public cohort size ``m``,
    so that one client moves the released sum by at most 1/2 (the sensitivity ``split_noise`` assumes; Flower's
    uncentred count, over the cohort it received, moves by 1).

    Example:
        >>> q = QuantileClip(1.0, target=0.5, lr=0.2, count_stddev=0.0)
        >>> round(q.step([True, True, True, True], noise=0.0, denominator=4), 4)  # all under the bound: it shrinks
        0.9048
    """

    def __init__(self, initial: float, *, target: float, lr: float, count_stddev: float) -> None:
        if not 0 <= target <= 1:
            raise ConfigError(f"aggregation.target_quantile must be in [0, 1], got {target}")
        if lr <= 0:
            raise ConfigError(f"aggregation.clip_lr must be > 0, got {lr}")
        self.bound, self.target, self.lr, self.count_stddev = float(initial), target, lr, count_stddev

    def step(self, unclipped: Sequence[bool], *, noise: float, denominator: int) -> float:
        """The next bound from this round's unclipped indicators, ``noise`` a standard normal draw, ``denominator``
        the round's planned cohort size."""
        if denominator <= 0:
            return self.bound
        fraction = (sum(b - 0.5 for b in unclipped) + self.count_stddev * noise) / denominator + 0.5
        self.bound *= math.exp(-self.lr * (fraction - self.target))
        return self.bound
