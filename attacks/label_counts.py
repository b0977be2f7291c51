"""Label counts of a message, from its classifier head's bias gradient (an LLG-style estimate).

For softmax cross-entropy averaged over ``B`` images, the head bias's gradient is exactly
``db_c = pbar_c - n_c / B`` (``pbar``: the batch's mean prediction, ``n_c``: images of class ``c``), so
``n = B (pbar - db)``. The batch's predictions are unknown; they are estimated on labelled public data as the
mix of per-class mean predictions at the current counts, ``pbar = sum_k (n_k / B) E[p | k]``, iterated to a fixed
point from the unconditional mean (after Wainakh et al., "User-level label leakage from gradients in FL", 2022,
who estimate the impact on auxiliary data). Counts are clipped at 0 and rounded by largest remainder to sum to
``B``. For an upload the pseudo-gradient ``-delta / (lr * steps)`` averages the steps' gradients, so the same
identity holds approximately with ``B`` the client's samples.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from privbench.attacks.base import Attack
from privbench.attacks.findings import InferredLabels
from privbench.attacks.views import LabelView, ViewKind
from privbench.errors import AttackNotApplicableError
from privbench.payloads.kinds import Carries


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


class LabelCounts(Attack):
    """The classes a message was computed from and how many images of each, from the head's bias gradient.

    Args:
        iterations: fixed-point iterations of the class-conditional estimate of the batch's mean prediction.
        public: most public (test-split) images used for that estimate.
    """

    name = "labels"
    reads: ClassVar[frozenset[Carries]] = frozenset({"gradient", "model"})
    view: ClassVar[ViewKind] = "labels"

    def __init__(self, *, iterations: int = 10, public: int = 2000) -> None:
        if iterations < 0 or public < 1:
            raise ValueError("attack.iterations must be >= 0 and attack.public >= 1")
        self.iterations, self.public = iterations, public

    def attack(self, view: LabelView, *, seed: int) -> InferredLabels:
        target = view.target
        bias = target.gradient.get(f"{target.head}.bias")
        if bias is None:
            raise AttackNotApplicableError(f"{target.knowledge.get('payload')}: the message does not carry the "
                                           f"classifier head's bias ({target.head}.bias), which the counts are read from")
        model, classes = target.model, target.num_classes
        with torch.no_grad():
            was = model.training
            model.eval()
            probabilities = torch.cat([F.softmax(model(view.public[i:i + 500]), 1)
                                       for i in range(0, len(view.public), 500)])
            model.train(was)
        overall = probabilities.mean(0)
        conditional = torch.stack([probabilities[view.public_labels == k].mean(0) if bool((view.public_labels == k).any())
                                   else overall for k in range(classes)])
        counts = counts_from_bias(bias, target.num_images, conditional, iterations=self.iterations)
        return InferredLabels(counts={int(c): int(n) for c, n in enumerate(counts) if n > 0})
