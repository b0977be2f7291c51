"""An empirical lower bound on epsilon from one training run (Steinke, Nasr and Jagielski, NeurIPS 2023).

``m`` canaries are each included in the training independently with probability 1/2; the auditor guesses
in or out for ``r`` of them and gets ``v`` right. Under (eps, delta)-DP the count of right guesses is
dominated by Binomial(r, e^eps / (1 + e^eps)) up to a delta term (the paper's Theorem 3.3 with its
Proposition 5.2 for delta > 0), so

    p(eps) = P[Bin(r, q) >= v] + 2 m delta max_{1 <= i <= v} P[v - i <= Bin(r, q) < v] / i,   q = e^eps/(1+e^eps)

is a p-value for "the mechanism is (eps, delta)-DP", and the largest eps with p(eps) < 1 - confidence is
the audit's lower bound at that confidence.
"""
from __future__ import annotations

import math

from scipy import stats


def p_value(m: int, r: int, v: int, *, epsilon: float, delta: float) -> float:
    """The chance of ``v`` or more right guesses out of ``r`` (of ``m`` canaries) under (epsilon, delta)-DP.

    Example:
        >>> round(p_value(100, 10, 10, epsilon=0.0, delta=0.0), 6)  # a fair coin, 10 of 10: 2^-10
        0.000977
    """
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(stats.binom.sf(v - 1, r, q))
    if delta == 0 or v == 0:
        return min(tail, 1.0)
    below = 0.0  # P[v - i <= Bin < v], growing with i
    worst = 0.0
    for i in range(1, v + 1):
        below += float(stats.binom.pmf(v - i, r, q))
        worst = max(worst, below / i)
    return min(tail + 2 * m * delta * worst, 1.0)


def epsilon_lower_bound(m: int, r: int, v: int, *, delta: float, confidence: float = 0.95) -> float:
    """The largest epsilon the audit rejects at ``confidence`` (0 when it rejects none), by bisection to 1e-6.

    Example:
        >>> round(epsilon_lower_bound(1000, 100, 100, delta=0.0), 3)  # 100 of 100 right: q^100 = 0.05
        3.493
    """
    alpha = 1.0 - confidence
    if not 0 < alpha < 1:
        raise ValueError("confidence must be in (0, 1)")
    if p_value(m, r, v, epsilon=0.0, delta=delta) >= alpha:
        return 0.0
    low, high = 0.0, 1.0
    while p_value(m, r, v, epsilon=high, delta=delta) < alpha:
        low, high = high, 2 * high
        if high > 1e3:
            return math.inf
    while high - low > 1e-6:
        mid = (low + high) / 2
        if p_value(m, r, v, epsilon=mid, delta=delta) < alpha:
            low = mid
        else:
            high = mid
    return low
