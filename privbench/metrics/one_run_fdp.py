"""An empirical lower bound from one run through f-DP (Mahloujifar, Melis and Chaudhuri, "Auditing f-differential
privacy in one run", ICML 2025).

The game is Steinke et al.'s (``metrics/one_run.py``): ``m`` canaries each included with probability 1/2, the auditor
guesses on ``guesses`` of them and abstains on the rest, ``right`` of its guesses are right. Where Steinke et al. test
an (epsilon, delta) pair, this tests a whole trade-off curve ``f``: if the mechanism were f-DP, the chance of
``right`` or more right guesses is at most ``tau`` whenever the backward recursion of the paper's Algorithm 3 (its
Theorem 3.2) ends above ``guesses / m``. With ``blow_up_inverse(y) = (1 - f)^-1(y)``, the least FPR at which any test
reaches TPR ``y``:

    r = tau right / m,  h = tau (guesses - right) / m
    for i = right - 1 .. 0:  h' = max(h, (k - 1) blow_up_inverse(r));  r += i / (guesses - i) (h' - h);  h = h'
    the curve is rejected when r + h > guesses / m

The curves tested are a family ordered by privacy (mu-GDP, or the audited round's own releases at a scaled noise);
the least private curve the run rejects gives the empirical epsilon at delta. delta enters only there, so unlike
Steinke et al.'s bound this one does not weaken as ``m`` grows.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from scipy.stats import norm

#: ``blow_up_inverse``: the least FPR at which a test of the curve reaches a given TPR (increasing on [0, 1]).
BlowUpInverse = Callable[[float], float]


def rejects(blow_up_inverse: BlowUpInverse, m: int, guesses: int, right: int, *, tau: float = 0.05,
            k: int = 2) -> bool:
    """Whether ``right`` of ``guesses`` right (of ``m`` canaries, ``k`` candidates each) has chance at most ``tau``
    under every mechanism with that curve: the curve is refuted at confidence ``1 - tau``.

    Example:
        >>> rejects(lambda y: y, 100, 10, 10)  # a mechanism that leaks nothing: 10 of 10 right has chance 2^-10
        True
    """
    if not 0 <= right <= guesses <= m:
        raise ValueError(f"need 0 <= right <= guesses <= m, got right={right}, guesses={guesses}, m={m}")
    r, h = tau * right / m, tau * (guesses - right) / m
    for i in range(right - 1, -1, -1):
        grown = max(h, (k - 1) * blow_up_inverse(min(max(r, 0.0), 1.0)))
        if grown == h:  # r cannot move either: the recursion has reached its fixed point
            break
        r += i / (guesses - i) * (grown - h)
        h = grown
    return r + h > guesses / m


def gdp_blow_up_inverse(mu: float) -> BlowUpInverse:
    """mu-GDP's ``(1 - f)^-1``: ``y -> Phi(Phi^-1(y) - mu)``."""
    return lambda y: float(norm.cdf(norm.ppf(y) - mu))


def gdp_delta(mu: float, epsilon: float) -> float:
    """delta at ``epsilon`` of mu-GDP (Dong, Roth and Su 2022, Corollary 2.13):
    ``Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)`` (the second term in logs, so a large epsilon stays finite)."""
    first = norm.cdf(-epsilon / mu + mu / 2)
    second = math.exp(min(epsilon + norm.logcdf(-epsilon / mu - mu / 2), 700.0))
    return float(first - second)


def gdp_epsilon(mu: float, *, delta: float) -> float:
    """The least epsilon at which mu-GDP is (epsilon, delta)-DP: 0 for ``mu <= 0``, inf for ``mu`` inf.

    Example:
        >>> round(gdp_epsilon(1.0, delta=1e-5), 4)  # the Gaussian mechanism at noise 1, sensitivity 1
        4.3772
    """
    from scipy.optimize import brentq

    if math.isnan(mu):
        return math.nan
    if not mu > 0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if gdp_delta(mu, 0.0) <= delta:
        return 0.0
    high = 1.0
    while gdp_delta(mu, high) > delta:
        high *= 2
        if high > 1e7:
            return math.inf
    return float(brentq(lambda eps: gdp_delta(mu, eps) - delta, 0.0, high, xtol=1e-10))


def largest_rejected(family: Callable[[float], BlowUpInverse], m: int, guesses: int, right: int, *,
                     tau: float = 0.05, high: float = 64.0, tol: float = 1e-6) -> float:
    """The largest ``t`` whose curve ``family(t)`` the run rejects (0 when it rejects none, ``high`` when it rejects
    all up to there), by bisection: ``family`` must grow less private as ``t`` grows (mu for GDP)."""
    def rejected(t: float) -> bool:
        return rejects(family(t), m, guesses, right, tau=tau)

    if not rejected(tol):
        return 0.0
    if rejected(high):
        return high
    low = tol
    while high - low > tol * max(1.0, low):
        mid = (low + high) / 2
        low, high = (mid, high) if rejected(mid) else (low, mid)
    return low


def gdp_lower_bound(m: int, guesses: int, right: int, *, delta: float, confidence: float = 0.95) -> tuple[float, float]:
    """``(mu, epsilon)``: the largest mu whose mu-GDP the run refutes at ``confidence``, and its epsilon at ``delta``.

    Example:
        >>> mu, eps = gdp_lower_bound(100_000, 1500, 1429, delta=1e-5)  # the paper's idealised sigma = 1 game
        >>> round(mu, 3), round(eps, 2)
        (0.782, 3.3)
    """
    mu = largest_rejected(gdp_blow_up_inverse, m, guesses, right, tau=1.0 - confidence)
    return mu, gdp_epsilon(mu, delta=delta)
