"""The f-DP trade-off of a client's DP-SGD releases: the highest TPR any membership test can reach at a given FPR.

Dong, Roth and Su, "Gaussian differential privacy" (2022): against a mechanism whose trade-off function is ``f``, every
test of "was this record in?" has ``TPR <= 1 - f(FPR)``. The client's releases are Gaussian mechanisms of noise
multiplier ``sigma`` (in units of the clip norm), each Poisson-subsampled at a rate, composed over their steps:
their privacy loss distribution (Google's ``dp_accounting``, add or remove one record, as Opacus accounts) gives
``f`` (``riskcal``, Kulynych et al. 2024). Releases at rate 1 alone are exactly ``mu``-GDP with
``mu = sqrt(steps) / sigma``, ``TPR = Phi(Phi^-1(FPR) + mu)``, which the tests check the distribution against.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

#: One accounted release: ``(noise_multiplier, sample_rate, steps)`` (an Opacus accountant's history entry).
Release = tuple[float, float, int]
#: Where the privacy loss distribution is discretised (its pessimistic rounding keeps the bound an upper bound).
DISCRETISATION = 1e-3
#: The most grid points one release's privacy loss may span: a small sigma's losses reach about 1 / sigma^2 nats
#: (10^6 at sigma 0.001, a 10^9-point grid at DISCRETISATION that took 14 GB), so its grid is coarsened to fit.
MAX_POINTS = 100_000


def discretisation(sigma: float) -> float:
    """The grid step for a release at ``sigma``: ``DISCRETISATION``, or coarser where its losses span more than
    ``MAX_POINTS`` steps (a coarser pessimistic grid gives a looser bound, still an upper bound).

    Example:
        >>> discretisation(1.0), round(discretisation(0.001), 2)
        (0.001, 10.2)
    """
    span = 1.0 / sigma**2 + 20.0 / sigma  # the loss's range to about 10 standard deviations each side
    return max(DISCRETISATION, span / MAX_POINTS)


def gaussian_dp_tpr(mu: float, fprs: Sequence[float]) -> list[float]:
    """``Phi(Phi^-1(FPR) + mu)``: the trade-off of ``mu``-GDP as a TPR at each FPR.

    Example:
        >>> [round(t, 3) for t in gaussian_dp_tpr(math.sqrt(3) / 0.461, [0.001])]  # 3 rate-1 releases at sigma 0.461
        [0.748]
    """
    from scipy.stats import norm

    return [float(norm.cdf(norm.ppf(a) + mu)) for a in fprs]


def tpr_bound(releases: Sequence[Release], fprs: Sequence[float]) -> list[float]:
    """The largest TPR at each FPR of any membership test on one record against ``releases`` composed.

    No release leaves chance (TPR = FPR); a release without noise allows a perfect test (TPR 1).
    """
    if any(not 0 < a < 1 for a in fprs):
        raise ValueError(f"FPRs must be in (0, 1), got {list(fprs)}")
    steps = [(float(s), float(q), int(n)) for s, q, n in releases if n > 0 and q > 0]
    if not steps:
        return [float(a) for a in fprs]
    if any(s <= 0 for s, _, _ in steps):
        return [1.0 for _ in fprs]
    whole = [(s, n) for s, q, n in steps if q >= 1]
    floor = gaussian_dp_tpr(math.sqrt(sum(n / s**2 for s, n in whole)), fprs) if whole else list(fprs)
    if len(whole) == len(steps) or min(floor) >= 1 - 1e-12:  # rate-1 releases alone are exactly mu-GDP
        return floor
    from riskcal.analysis import get_beta_from_pld

    betas = np.atleast_1d(get_beta_from_pld(_pld(steps), alpha=np.asarray(fprs, dtype=float)))
    out = [float(min(1.0, max(a, 1.0 - b))) for a, b in zip(fprs, betas)]
    if any(t < f - 1e-9 for t, f in zip(out, floor)):  # below a part of itself: the arithmetic failed (losses of
        return [1.0 for _ in fprs]                       # hundreds of nats); TPR 1 is the bound left that holds
    return out


def _pld(releases: Sequence[Release]):  # type: ignore[no-untyped-def]
    """The privacy loss distribution of ``releases`` composed (each with noise)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    pld = None
    for sigma, rate, count in releases:
        one = pld_lib.from_gaussian_mechanism(standard_deviation=sigma, sampling_prob=min(rate, 1.0),
                                              value_discretization_interval=discretisation(sigma)).self_compose(count)
        pld = one if pld is None else pld.compose(one)
    return pld


def blow_up_inverse(releases: Sequence[Release]) -> Callable[[float], float]:
    """``(1 - f)^-1`` of ``releases`` composed, rounded down: the least FPR at which a membership test reaches a TPR,
    as the largest of 4,000 FPRs from 1e-15 to 1 whose (pessimistic) TPR is at most it. Rounding down claims less
    privacy than the releases have, so a curve the one-run f-DP audit (``metrics.one_run_fdp``) refutes with it is
    refuted."""
    from riskcal.analysis import get_beta_from_pld
    from scipy.stats import norm

    fprs = np.concatenate([[0.0], np.logspace(-15, 0, 4000)])
    tprs = np.nan_to_num(1.0 - np.atleast_1d(get_beta_from_pld(_pld(releases), alpha=fprs)), nan=1.0)
    tprs = np.maximum.accumulate(np.maximum(tprs, fprs))  # a trade-off curve lies above chance and rises
    # the first release alone allows a threshold test of TPR (1 - q) a + q Phi(Phi^-1(a) + 1 / sigma): a curve below
    # it is arithmetic that failed (losses of hundreds of nats), and the only curve left that holds is a perfect test
    sigma, rate, _ = releases[0]
    with np.errstate(divide="ignore"):
        floor = (1 - min(rate, 1.0)) * fprs + min(rate, 1.0) * norm.cdf(norm.ppf(fprs) + 1.0 / sigma)
    if (tprs < floor - 1e-6).any():
        return lambda y: 0.0  # never refuted
    return lambda y: float(fprs[max(int(np.searchsorted(tprs, y, side="right")) - 1, 0)])


def releases_epsilon(releases: Sequence[Release], delta: float) -> float:
    """The tight epsilon at ``delta`` of ``releases`` composed (their privacy loss distribution)."""
    return float(_pld(releases).get_epsilon_for_delta(delta))
