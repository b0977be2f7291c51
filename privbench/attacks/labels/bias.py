"""Label counts of a message, from its classifier head's bias gradient (an LLG-style estimate).

For softmax cross-entropy averaged over ``B`` images, the head bias's gradient is exactly
``db_c = pbar_c - n_c / B`` (``pbar``: the batch's mean prediction, ``n_c``: images of class ``c``), so
``n = B (pbar - db)``. The batch's predictions are unknown; they are estimated on labelled public data as the
mix of per-class mean predictions at the current counts, ``pbar = sum_k (n_k / B) E[p | k]``, iterated to a fixed
point from the unconditional mean (after Wainakh et al., "User-level label leakage from gradients in FL", 2022,
who estimate the impact on auxiliary data). Counts are clipped at 0 and rounded by largest remainder to sum to
``B``. For an upload the pseudo-gradient ``-delta / (lr * steps)`` averages the steps' bias gradients, so
``n = N (mean_t pbar_t - db)`` over the client's ``N`` samples (epochs of equal batches); the steps' predictions
``pbar_t`` are estimated at the models where the steps took their gradients, interpolated on the line from the
received model to the one the upload implies, ``theta_0 + (t/S)(theta_S - theta_0)`` for ``t = 0 .. S-1``
(Dimitrov et al., "Data Leakage in Federated Averaging", TMLR 2022, estimate a FedSGD label attack's parameters at
every FedAvg step this way), at most ``points`` of them evenly spaced.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from privbench.attacks.target import AttackTarget
from privbench.errors import AttackNotApplicableError


def largest_remainder(share: np.ndarray, total: int) -> np.ndarray:
    """Non-negative integers summing to ``total`` closest to ``share`` (scaled to sum to ``total``).

    Example:
        >>> largest_remainder(np.array([1.6, 1.3, 0.1]), 3).tolist()
        [2, 1, 0]
    """
    share = np.clip(share, 0.0, None)
    share = share * total / share.sum() if share.sum() > 0 else np.full(len(share), total / len(share))
    counts = np.floor(share).astype(int)
    for c in np.argsort(-(share - counts), kind="stable")[: total - int(counts.sum())]:
        counts[c] += 1
    return counts


def counts_from_bias(bias_gradient: torch.Tensor, batch: int, conditional: torch.Tensor, *,
                     iterations: int = 10) -> np.ndarray:
    """Per-class counts of a batch of ``batch`` images from its head bias gradient and ``conditional[k]``, the mean
    prediction on public images of class ``k`` (``[C, C]``)."""
    db = bias_gradient.double().cpu()
    mix = conditional.double().cpu()
    pbar = mix.mean(0)
    counts = largest_remainder((batch * (pbar - db)).numpy(), batch)
    for _ in range(iterations):
        pbar = torch.from_numpy(counts / batch) @ mix
        again = largest_remainder((batch * (pbar - db)).numpy(), batch)
        if (again == counts).all():
            break
        counts = again
    return counts


def path_fractions(steps: int, points: int) -> list[float]:
    """Where on the line ``theta_0 -> theta_S`` the ``steps`` SGD steps took their gradients (``t/S``, ``t < S``),
    at most ``points`` of them evenly spaced (always including ``t = 0``).

    Example:
        >>> path_fractions(4, 8), path_fractions(5, 2)
        ([0.0, 0.25, 0.5, 0.75], [0.0, 0.8])
    """
    if steps <= points:
        return [t / steps for t in range(steps)]
    if points == 1:
        return [0.0]
    return [k / (points - 1) * (steps - 1) / steps for k in range(points)]


def update_path(target: AttackTarget, points: int) -> list[dict[str, torch.Tensor]]:
    """States where an update's steps took their gradients (``path_fractions``), interpolated between the received
    model and the end of the local training the payload implies (``theta_S = theta_0 - lr * steps * g`` on the names
    it carries; the rest stay at ``theta_0``). A gradient (one step), or ``points`` = 1, gives the received model
    alone."""
    start = {n: p.detach() for n, p in target.model.named_parameters()}
    training = target.knowledge.get("training") or {}
    steps = int(training.get("steps", 1))
    if points <= 1 or steps <= 1:
        return [start]
    scale = float(training["lr"]) * steps
    end = {n: start[n] - scale * target.gradient[n] if n in target.gradient else start[n] for n in start}
    return [{n: start[n] + f * (end[n] - start[n]) for n in start} for f in path_fractions(steps, points)]


def conditional_predictions(model: nn.Module, states: list[dict[str, torch.Tensor]], public: torch.Tensor,
                            public_labels: torch.Tensor, classes: int) -> torch.Tensor:
    """``E[p | k]``: the mean softmax prediction on public images of each class ``k`` (``[C, C]``), averaged over
    ``states`` (the models along an update's path); a class without public images gets the overall mean."""
    total = torch.zeros(classes, classes, dtype=torch.float64)
    was = model.training
    model.eval()
    with torch.no_grad():
        for state in states:
            probabilities = torch.cat([F.softmax(functional_call(model, state, (public[i:i + 500],)), 1)
                                       for i in range(0, len(public), 500)]).double().cpu()
            overall = probabilities.mean(0)
            labels = public_labels.cpu()
            total += torch.stack([probabilities[labels == k].mean(0) if bool((labels == k).any()) else overall
                                  for k in range(classes)])
    model.train(was)
    return total / len(states)


def estimate_counts(target: AttackTarget, public: torch.Tensor, public_labels: torch.Tensor, *, points: int = 1,
                    iterations: int = 10) -> np.ndarray:
    """Per-class counts of the ``target.num_images`` images a message was computed from, from its head bias and the
    public prior along ``points`` states of its update."""
    bias = target.gradient.get(f"{target.head}.bias")
    if bias is None:
        raise AttackNotApplicableError(f"{target.knowledge.get('payload')}: the message does not carry the "
                                       f"classifier head's bias ({target.head}.bias), which the counts are read from")
    conditional = conditional_predictions(target.model, update_path(target, points), public, public_labels,
                                          target.num_classes)
    return counts_from_bias(bias, target.num_images, conditional, iterations=iterations)
