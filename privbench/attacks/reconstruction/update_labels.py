"""The labels an update-inverting attack lays out: per-class counts recovered from one client's update (or handed
over by the evaluator as a control), else none (optimised jointly)."""
from __future__ import annotations

import numpy as np
import torch

from privbench.attacks.labels.bias import estimate_counts
from privbench.attacks.labels.counts import with_true_counts
from privbench.attacks.labels.views import LabelView

#: Where the labels come from: the update's recovered counts, or the batch's true counts (``labels.counts.ORACLE``).
LABELS = ("counts", "oracle")


def update_counts(view: LabelView, *, labels: str, points: int) -> np.ndarray | None:
    """Per-class counts of the update's images: ``oracle`` the evaluator's true counts; ``counts`` those the head's
    bias gives away along the update (``estimate_counts``, at ``points`` models) where the message carries it and
    holds one client's update; None otherwise. ``target.knowledge["labels"]`` says which."""
    target = view.target
    counted = target.unroll is not None and len(target.unroll.parts) == 1 and f"{target.head}.bias" in target.gradient
    target.knowledge["labels"] = ("per-class counts recovered from the head's bias along the update" if counted
                                  else "optimised jointly")
    if labels == "oracle":  # with_true_counts refuses an aggregate replayed member by member
        true = with_true_counts(target, view.oracle_counts).labels
        assert true is not None
        target.labels = None
        return np.bincount(true.cpu().numpy(), minlength=target.num_classes)
    return estimate_counts(target, view.public, view.public_labels, points=points) if counted else None


def laid_out(counts: np.ndarray, generator: torch.Generator) -> np.ndarray:
    """The labels of ``counts`` in one random order (drawn with ``generator``)."""
    order = np.repeat(np.arange(len(counts)), counts)
    return order[torch.randperm(len(order), generator=generator).numpy()]


def counts_shown(counts: np.ndarray | None) -> dict[int, int] | None:
    """The laid-out counts as the finding's ``info`` holds them (class: images, classes present only)."""
    return {int(c): int(n) for c, n in enumerate(counts) if n} if counts is not None else None


def counts_source(counts: np.ndarray | None, labels: str) -> str:
    """The finding's label source: optimised (no counts), the oracle's true counts, or the recovered ones."""
    if counts is None:
        return "optimised"
    return "given: true counts (oracle)" if labels == "oracle" else "recovered counts"
