"""Membership-inference figures as the field reports them: ROC, AUC, TPR at a low FPR with a Clopper-Pearson interval.

A higher score means "more likely a member". Chance is AUC 0.5 and TPR = FPR (Carlini et al., 2022, argue
for TPR at FPR 1 % and 0.1 % over AUC: an attack that is confident on a few records matters more than one
slightly better than chance on all).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats


def roc(scores: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(fpr, tpr)`` at every threshold, from accepting nothing to accepting everything (ties taken together).

    Example:
        >>> fpr, tpr = roc(np.array([0.9, 0.8, 0.3, 0.1]), np.array([True, False, True, False]))
        >>> fpr.tolist(), tpr.tolist()
        ([0.0, 0.0, 0.5, 0.5, 1.0], [0.0, 0.5, 0.5, 1.0, 1.0])
    """
    scores, members = np.asarray(scores, dtype=float), np.asarray(members, dtype=bool)
    _check(scores, members)
    order = np.argsort(-scores, kind="stable")
    s, m = scores[order], members[order]
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # the last index of each run of tied scores
    tp, fp = np.cumsum(m)[last], np.cumsum(~m)[last]
    return np.r_[0.0, fp / (~members).sum()], np.r_[0.0, tp / members.sum()]


def auc(scores: np.ndarray, members: np.ndarray) -> float:
    """Area under the ROC curve: the chance that a random member scores above a random non-member (ties 1/2).

    Example:
        >>> auc(np.array([0.9, 0.8, 0.3, 0.1]), np.array([True, False, True, False]))
        0.75
    """
    scores, members = np.asarray(scores, dtype=float), np.asarray(members, dtype=bool)
    _check(scores, members)
    ranks = stats.rankdata(scores)  # ties get their mean rank
    n1, n0 = int(members.sum()), int((~members).sum())
    return float((ranks[members].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def tpr_at_fpr(scores: np.ndarray, members: np.ndarray, fpr: float) -> tuple[float, int, int]:
    """The highest TPR at a threshold whose FPR is at most ``fpr``, with its true-positive count and the members.

    Example:
        >>> tpr_at_fpr(np.array([0.9, 0.8, 0.7, 0.3, 0.2, 0.1]), np.array([True, True, False, True, False, False]), 0.0)
        (0.6666666666666666, 2, 3)
    """
    best = float(tpr_at(*roc(scores, members), np.array([fpr]))[0])
    n = int(np.asarray(members, dtype=bool).sum())
    return best, int(round(best * n)), n


def tpr_at(fpr: np.ndarray, tpr: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The highest TPR of the ROC ``(fpr, tpr)`` at FPR at most each ``grid`` value (0 where none is allowed).

    Example:
        >>> tpr_at(np.array([0.0, 0.0, 0.5, 1.0]), np.array([0.0, 0.5, 0.5, 1.0]), np.array([0.1, 0.5, 1.0])).tolist()
        [0.5, 0.5, 1.0]
    """
    order = np.argsort(fpr, kind="stable")
    fpr, best = np.asarray(fpr)[order], np.maximum.accumulate(np.asarray(tpr)[order])
    at = np.searchsorted(fpr, np.asarray(grid) + 1e-12, side="right") - 1
    return np.where(at >= 0, best[np.clip(at, 0, None)], 0.0)


def clopper_pearson(k: int, n: int, *, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) ``level`` interval of a binomial proportion ``k / n``.

    Example:
        >>> lo, hi = clopper_pearson(0, 100)  # no hit in 100: [0, 1 - 0.025^(1/100)]
        >>> lo, round(hi, 4)
        (0.0, 0.0362)
    """
    if n <= 0 or not 0 <= k <= n:
        return math.nan, math.nan
    alpha = 1 - level
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def _check(scores: np.ndarray, members: np.ndarray) -> None:
    if scores.shape != members.shape or scores.ndim != 1:
        raise ValueError("scores and members must be 1-D and of one length")
    if not members.any() or members.all():
        raise ValueError("need at least one member and one non-member")
    if not np.isfinite(scores).all():
        raise ValueError("membership scores must be finite")
