"""Flower's adaptive-clipping DP wrappers as they ran (Andrew et al., NeurIPS 2021, as Flower 1.42 implements it):
the clip each round's updates were clipped to, read from the wrapper as the round's train messages leave, and the
privacy the rounds spent given that trajectory.

``DifferentialPrivacy{Server,Client}SideAdaptiveClipping`` (the legacy and the Message API wrappers alike) update
their clip inside ``aggregate_train`` *before* they add the model noise, so round ``t``'s mean, whose updates were
clipped to ``C_t``, is noised with ``z_Delta C_{t+1} / m``; and they count the clipped updates uncentred (one client
moves the count by 1, where the noise split ``compute_adaptive_noise_params`` assumes 1/2, a centred count under
add/remove adjacency). Each round releases two Gaussian mechanisms, the mean and the count, so ``mu_t^2 = (C_t m /
(n z_Delta C_{t+1}))^2 + (1 / sigma_b)^2`` with ``n`` updates received of the ``m`` declared, and the rounds compose
as ``mu = sqrt(sum mu_t^2)``. That is the run's
realised spending, read after the fact: ``C_t / C_{t+1}`` depends on the noisy count and has no bound set in
advance, so it is no guarantee the wrapper could have given (that needs a privacy filter). The wrapper's own setting
claims ``sqrt(T) / z`` with ``z^-2 = z_Delta^-2 + (2 sigma_b)^-2``."""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


def adaptive_wrapper(strategies: Iterable[Any]) -> Any | None:
    """The first of ``strategies`` that is one of Flower's adaptive-clipping DP wrappers, or None."""
    return next((s for s in strategies if type(s).__name__.startswith("DifferentialPrivacy")
                 and "AdaptiveClipping" in type(s).__name__), None)


def stated_noise(z_delta: float, sigma_b: float) -> float:
    """The noise multiplier the wrapper was given, from the split it keeps (``z_Delta`` for the mean, ``sigma_b`` for
    the count): ``(z_Delta^-2 + (2 sigma_b)^-2)^-1/2``; ``z_Delta`` itself without a count's noise.

    Example:
        >>> round(stated_noise(0.8728715609439696, 1.0), 6)  # Flower's split of z = 0.8 with sigma_b = 1
        0.8
    """
    if not z_delta > 0:
        return 0.0
    if not sigma_b > 0:
        return z_delta
    return (z_delta ** -2 + (2 * sigma_b) ** -2) ** -0.5


@dataclass
class ClipTrajectory:
    """The clip of an adaptive wrapper when each round's train messages left (``clips``) and after the last round
    (``final``)."""

    clips: dict[int, float] = field(default_factory=dict)
    final: float | None = None

    def note(self, round_: int | None, wrapper: Any) -> None:
        """Keep the wrapper's clip as round ``round_``'s (the first time its train messages leave)."""
        if round_ is not None and round_ not in self.clips:
            self.clips[round_] = float(wrapper.clipping_norm)

    def used(self, round_: int) -> float | None:
        """The clip round ``round_``'s updates were clipped to."""
        return self.clips.get(round_)

    def noised(self, round_: int) -> float | None:
        """The clip round ``round_``'s noise was scaled by: the clip after that round's update (the next round's, or
        the last one's after the run)."""
        later = [r for r in self.clips if r > round_]
        return self.clips[min(later)] if later else self.final


def _unbounded(trajectory: ClipTrajectory, why: str) -> dict[str, Any]:
    return {"adaptive_clips": trajectory.clips, "mu_as_run": math.inf, "mu_mean_as_run": math.inf,
            "epsilon_as_run": math.inf, "problems": [f"adaptive clipping: {why}, so what its rounds spent is not "
                                                     "bounded here"]}


def as_run(trajectory: ClipTrajectory, *, z_delta: float, sigma_b: float, declared: int,
           received: Mapping[int, int], delta: float) -> dict[str, Any]:
    """The privacy a client spent over the rounds the wrapper trained (``received``: round -> updates counted),
    against the wrapper's stated setting; one line of problems where they part, or where a round's clip was not
    noted (then unbounded)."""
    from privbench.metrics.one_run_fdp import gdp_epsilon

    rounds = sorted(received)
    if not rounds or set(rounds) != set(trajectory.clips):
        return _unbounded(trajectory, f"the clip was noted for rounds {sorted(trajectory.clips)} where the strategy "
                                      f"trained rounds {rounds}")
    ratios, per_round, means = [], [], []
    for r in rounds:
        used, noised, n = trajectory.used(r), trajectory.noised(r), received[r]
        if used is None or noised is None or not (z_delta > 0 and noised > 0 and n > 0):
            return _unbounded(trajectory, f"round {r} has no clip after its update or no noise")
        ratios.append(used / noised)
        means.append((used * declared / (n * z_delta * noised)) ** 2)
        per_round.append(means[-1] + (sigma_b ** -2 if sigma_b > 0 else 0.0))
    z = stated_noise(z_delta, sigma_b)
    mu_run = math.sqrt(sum(per_round))
    mu_stated = math.sqrt(len(rounds)) / z if z > 0 else math.inf
    out: dict[str, Any] = {
        "adaptive_clips": {r: trajectory.clips[r] for r in rounds}, "adaptive_clip_final": trajectory.final,
        "noise_multiplier_stated": z, "noise_multiplier_model": z_delta, "clipped_count_stddev": sigma_b,
        "clip_ratio_range": [min(ratios), max(ratios)] if ratios else [],
        "mu_as_run": mu_run, "mu_mean_as_run": math.sqrt(sum(means)), "mu_stated": mu_stated,
        "epsilon_as_run": gdp_epsilon(mu_run, delta=delta),
        "epsilon_stated": gdp_epsilon(mu_stated, delta=delta), "problems": []}
    if mu_run > mu_stated * 1.001:
        out["problems"].append(
            f"adaptive clipping spent epsilon {out['epsilon_as_run']:.3g} over {len(rounds)} rounds where its "
            f"setting (z {z:.3g}) states {out['epsilon_stated']:.3g}: one client moves its clipped count by 1 (the "
            f"split assumes 1/2) and each round is noised at the clip after its update (C_t / C_t+1 from "
            f"{min(ratios):.3g} to {max(ratios):.3g})")
    return out
