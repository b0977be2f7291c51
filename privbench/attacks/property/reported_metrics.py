"""Class proportions from the evaluation figures a client reports: the property its metrics messages give away.

A client that evaluates a model the server sent and reports the mean loss (or accuracy) over its own records
reports ``sum_c p_c m_c(theta)``: ``p_c`` its share of class ``c``, ``m_c(theta)`` the model's mean loss (accuracy)
on its records of class ``c``. The server sent ``theta``, so it estimates every ``m_c(theta)`` on labelled public
records, and each reported figure is one linear equation in ``p``. Each equation is off by noise: the public
per-class means are estimates, and the client's own records of a class are a sample too; its variance is
estimated from the per-record spread of the public figures (``equation_variance``). The attacker fits ``p`` on the
simplex by weighted least squares with a ridge towards the class-frequency prior whose weight is set by
Morozov's discrepancy principle (the fit explains the figures down to their noise and no further;
``discrepancy_fit``): figures no more informative than their noise leave the prior, and figures that determine
``p`` give it.
"""
from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

Figure = Literal["loss", "hit_rate"]


def figure_of(key: str) -> Figure | None:
    """What a metric named ``key`` is read as: a mean cross-entropy (``loss`` in the name), an accuracy (``acc``),
    or nothing.

    Example:
        >>> figure_of("eval_loss"), figure_of("val_accuracy"), figure_of("num-examples")
        ('loss', 'hit_rate', None)
    """
    low = key.lower()
    if "loss" in low:
        return "loss"
    if "acc" in low:
        return "hit_rate"
    return None


@torch.no_grad()
def per_class_means(model: nn.Module, x: torch.Tensor, y: torch.Tensor, classes: int, *, batch: int = 500
                    ) -> dict[str, torch.Tensor]:
    """The model's mean cross-entropy and accuracy on the records of each class (``loss``, ``hit_rate``:
    ``[classes]``, NaN for a class with no record) and their per-record variances (``loss_var``; ``hit_rate_var``
    from the hit rate with half a hit and half a miss added), in eval mode."""
    was = model.training
    model.eval()
    losses, hits = [], []
    for i in range(0, len(y), batch):
        logits = model(x[i:i + batch]).double()
        losses.append(F.cross_entropy(logits, y[i:i + batch].long(), reduction="none"))
        hits.append((logits.argmax(1) == y[i:i + batch]).double())
    model.train(was)
    labels = y.long()
    counts = torch.bincount(labels, minlength=classes).double()
    out: dict[str, torch.Tensor] = {}
    for name, values in (("loss", torch.cat(losses)), ("hit_rate", torch.cat(hits))):
        total = torch.zeros(classes, dtype=torch.float64).index_add_(0, labels, values)
        mean = torch.where(counts > 0, total / counts.clamp_min(1), torch.tensor(float("nan"), dtype=torch.float64))
        square = torch.zeros(classes, dtype=torch.float64).index_add_(0, labels, (values - mean[labels]) ** 2)
        var = square / (counts - 1).clamp_min(1)
        pooled = var[counts > 1].mean() if bool((counts > 1).any()) else torch.tensor(0.0, dtype=torch.float64)
        out[name], out[f"{name}_var"] = mean, torch.where(counts > 1, var, pooled)  # one record: no spread of its own
    smoothed = (out["hit_rate"] * counts + 0.5) / (counts + 1)  # a class all right (or wrong) here need not be so
    out["hit_rate_var"] = smoothed * (1 - smoothed)  # on the client's records: Jeffreys' half a hit
    return out


def equation_variance(variances: torch.Tensor, public_counts: torch.Tensor, shares: torch.Tensor,
                      records: int | None) -> float:
    """The variance of ``reported - sum_c p_c mean_c`` at shares ``p``: each public mean's (``var_c / n_c``,
    weighted ``p_c^2``) and, with the client's record count ``N``, its own records' (``p_c var_c / N``: about
    ``p_c N`` records of class ``c``).

    Example:
        >>> equation_variance(torch.tensor([1.0, 4.0]), torch.tensor([10.0, 10.0]), torch.tensor([0.5, 0.5]), 100)
        0.15
    """
    public = float((shares.double() ** 2 * variances.double() / public_counts.double().clamp_min(1)).sum())
    own = float((shares.double() * variances.double()).sum()) / records if records else 0.0
    return public + own


def fit_proportions(rows: torch.Tensor, values: torch.Tensor, prior: torch.Tensor, *, ridge: float = 0.0
                    ) -> torch.Tensor:
    """``argmin_p ||rows p - values||^2 + ridge ||p - prior||^2`` over the probability simplex: non-negative least
    squares (``scipy.optimize.nnls``, exact active set) with the shares' sum held to 1 by a row of weight 1e6.

    Example:
        >>> rows = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
        >>> p = fit_proportions(rows, torch.tensor([0.2, 0.5], dtype=torch.float64), torch.full((3,), 1 / 3))
        >>> [round(v, 6) for v in p.tolist()]
        [0.2, 0.5, 0.3]
    """
    from scipy.optimize import nnls

    a, b, q = rows.double().numpy(), values.double().numpy(), prior.double().numpy()
    k = a.shape[1]
    weight = 1e6 * max(1.0, float(np.abs(a).max(initial=0.0)))
    stacked = np.vstack([a, math.sqrt(ridge) * np.eye(k), weight * np.ones((1, k))])
    target = np.concatenate([b, math.sqrt(ridge) * q, [weight]])
    p, _ = nnls(stacked, target, maxiter=50 * k)
    return torch.from_numpy(p / p.sum())


def discrepancy_fit(rows: torch.Tensor, values: torch.Tensor, sigma: torch.Tensor, prior: torch.Tensor
                    ) -> tuple[torch.Tensor, float, float]:
    """The shares whose weighted residual ``sum_r ((rows p - values)_r / sigma_r)^2`` equals the number of
    equations (Morozov's discrepancy principle), with the largest ridge towards ``prior`` that reaches it; the
    prior itself (ridge inf) where it already fits that well, the best fit (ridge 0) where nothing does.
    Returns the shares, the ridge and the best fit's weighted residual.

    Example:
        >>> rows = torch.eye(2, dtype=torch.float64)
        >>> p, ridge, best = discrepancy_fit(rows, torch.tensor([0.52, 0.48]), torch.tensor([0.1, 0.1]),
        ...                                  torch.full((2,), 0.5))
        >>> p.tolist(), ridge, round(best, 6)
        ([0.5, 0.5], inf, 0.0)
    """
    a, b = rows.double() / sigma.double()[:, None], values.double() / sigma.double()
    goal = float(len(b))

    def misfit(p: torch.Tensor) -> float:
        return float(((a @ p - b) ** 2).sum())

    best = fit_proportions(a, b, prior)
    least = misfit(best)
    if misfit(prior.double()) <= goal:
        return prior.double(), math.inf, least
    if least >= goal:
        return best, 0.0, least
    low, high = -12.0, 12.0  # log10 of the ridge, relative to the equations' scale
    scale = float((a ** 2).sum()) / a.shape[1]
    for _ in range(48):
        middle = (low + high) / 2
        if misfit(fit_proportions(a, b, prior, ridge=scale * 10 ** middle)) > goal:
            high = middle
        else:
            low = middle
    ridge = scale * 10 ** low
    return fit_proportions(a, b, prior, ridge=ridge), ridge, least


#: the mean squared standardised residual of the best fit above which the figures are not mixtures of the model's
#: per-class figures (off by more than 3 noise standard deviations on average: a sum, a percentage, another model)
INCONSISTENT = 9.0


def off_hull(rows: torch.Tensor, values: torch.Tensor, sigma: torch.Tensor, kind: Figure) -> str | None:
    """Why figures of one key cannot be mixtures of the per-class figures ``rows`` (an accuracy outside [0, 1], a
    figure more than 3 sigma outside the per-class range of its model), or None.

    Example:
        >>> rows = torch.tensor([[0.5, 1.0]], dtype=torch.float64)
        >>> off_hull(rows, torch.tensor([50.0]), torch.tensor([0.1]), "hit_rate")
        'an accuracy of 50 is not a fraction'
        >>> off_hull(rows, torch.tensor([0.7]), torch.tensor([0.1]), "loss") is None
        True
    """
    if kind == "hit_rate" and bool(((values < 0) | (values > 1)).any()):
        bad = float(values[(values < 0) | (values > 1)][0])
        return f"an accuracy of {bad:g} is not a fraction"
    low, high = rows.min(1).values - 3 * sigma, rows.max(1).values + 3 * sigma
    outside = (values < low) | (values > high)
    if bool(outside.any()):
        i = int(torch.nonzero(outside)[0])
        return (f"{float(values[i]):.4g} lies outside the model's per-class {kind} range [{float(rows[i].min()):.4g}, "
                f"{float(rows[i].max()):.4g}] by more than 3 sigma: not a mean over records of the model sent")
    return None


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    """Half the L1 distance between two class distributions (0 equal, 1 disjoint).

    Example:
        >>> total_variation(torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5]))
        0.5
    """
    return 0.5 * float((p.double() - q.double()).abs().sum())
