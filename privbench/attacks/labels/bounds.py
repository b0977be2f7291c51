"""What one step's head gradient proves about its batch's label counts, and the check that catches a wrong estimate.

For softmax cross-entropy averaged over ``B`` images the head bias's gradient is ``db_c = pbar_c - n_c / B`` with
``0 <= pbar_c <= 1``, so every count lies in ``[-B db_c, B (1 - db_c)]`` whatever the images are. When the head's
inputs are non-negative (a ReLU or sigmoid before it), row ``c`` of the weight gradient, ``sum_i (p_ic - y_ic) h_i
/ B``, has no negative entry unless class ``c`` is in the batch, so a negative entry proves ``n_c >= 1``. These
bounds need no public data: an estimate they exclude is wrong. The shadow-batch estimator (``head.py``) leans on
public images from the client's distribution; on a client of another domain it can be far off (label accuracy 0.0
and 0.25 on batches of 8 in a review), and the bounds exclude most such estimates. Within the bounds, the counts
whose implied mean prediction ``pbar = n / B + db`` is flattest (a water-filling, exact where the model predicts
near-uniformly, as at initialisation) are the estimate that uses the gradient alone.

The identities hold for one clean step: not for a multi-step update, nor under DP-SGD's per-sample clipping.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from privbench.attacks.labels.head import counts_from_head, head_inputs
from privbench.attacks.target import AttackTarget
from privbench.errors import AttackNotApplicableError

#: Slack on a bound, in images (a float32 gradient's rounding is far smaller).
SLACK = 1e-3
#: Largest ``|sum_c db_c|`` of a clean step, per class (0 in exact arithmetic; float32 rounding left 5e-8 on LeNet's
#: ten classes at a batch of 16; Gaussian noise of 1e-3 on ten classes moves it by about 3e-3).
CLEAN = 1e-7


@dataclass(frozen=True)
class CountBounds:
    """Per-class bounds on a batch's label counts that one step's head gradient proves."""

    lower: np.ndarray
    upper: np.ndarray
    present: np.ndarray  # classes a negative weight-gradient entry proves present (all False when not read)
    batch: int
    clean: bool = True  # the bias gradient sums to 0, as softmax cross-entropy's does (noise or compression breaks it)

    @property
    def feasible(self) -> bool:
        """Whether the gradient reads as one clean step and some counts summing to the batch fit (else it is not one
        clean step of that batch: noised, compressed, or of another batch size)."""
        return self.clean and int(self.lower.sum()) <= self.batch <= int(self.upper.sum()) and bool((self.lower <= self.upper).all())

    def admits(self, counts: np.ndarray) -> bool:
        """Whether ``counts`` lie within every bound."""
        return bool(((counts >= self.lower) & (counts <= self.upper)).all())


def count_bounds(weight_gradient: torch.Tensor, bias_gradient: torch.Tensor, batch: int, *,
                 nonnegative_inputs: bool) -> CountBounds:
    """The bounds on each class's count from one step's head gradients (module docstring); presence is read from
    the weight gradient only when the head's inputs are non-negative.

    Example:
        >>> db = torch.tensor([0.1 - 3 / 4, 0.1 - 1 / 4, 0.1, 0.1] + [0.1] * 6)  # pbar 0.1 everywhere, counts 3, 1
        >>> count_bounds(torch.zeros(10, 2), db, 4, nonnegative_inputs=False).lower[:4].tolist()
        [3, 1, 0, 0]
    """
    bias = bias_gradient.detach().double().cpu().numpy()
    lower = np.maximum(0, np.ceil(-batch * bias - SLACK)).astype(int)
    upper = np.minimum(batch, np.floor(batch * (1 - bias) + SLACK)).astype(int)
    present = np.zeros(len(bias), dtype=bool)
    if nonnegative_inputs:
        weight = weight_gradient.detach().double().cpu()
        scale = float(weight.abs().max()) if weight.numel() else 0.0
        present = (weight < -1e-9 * scale).any(1).numpy() if scale > 0 else present
        lower = np.maximum(lower, present.astype(int))
    return CountBounds(lower, upper, present, batch, clean=abs(float(bias.sum())) <= CLEAN * len(bias))


def counts_from_bounds(bias_gradient: torch.Tensor, bounds: CountBounds) -> np.ndarray:
    """The counts within ``bounds`` whose implied mean prediction ``n / B + db`` is flattest: from the lower
    bounds, one image at a time to the class whose implied prediction is lowest (proven-present classes first)."""
    bias = bias_gradient.detach().double().cpu().numpy()
    counts = bounds.lower.copy()
    while counts.sum() < bounds.batch:
        room = counts < bounds.upper
        chosen = room & bounds.present if (room & bounds.present).any() else room
        if not chosen.any():
            break
        candidates = np.flatnonzero(chosen)
        counts[candidates[np.argmin(counts[candidates] + bounds.batch * bias[candidates])]] += 1
    return counts


def head_bounds(target: AttackTarget, public: torch.Tensor) -> CountBounds:
    """The bounds ``target``'s head gradient proves; presence is read when the head's inputs on the public images
    are all non-negative (a ReLU or sigmoid before the head)."""
    head = target.head
    weight, bias = target.gradient.get(f"{head}.weight"), target.gradient.get(f"{head}.bias")
    if weight is None or bias is None:
        raise AttackNotApplicableError(f"{target.knowledge.get('payload')}: the message does not carry the classifier "
                                       f"head's bias and weight ({head}.bias, {head}.weight), which the label counts "
                                       "are read from")
    inputs, _ = head_inputs(target.model, head, public[:256])
    return count_bounds(weight, bias, target.num_images, nonnegative_inputs=bool((inputs >= 0).all()))


def checked_head_counts(target: AttackTarget, public: torch.Tensor, public_labels: torch.Tensor, *,
                        shadows: int = 4000, refits: int = 1, seed: int = 0) -> tuple[np.ndarray, str]:
    """The shadow-batch counts (``head.counts_from_head``) where the gradient's bounds admit them, else the counts
    from the bounds alone; and which (``head``, ``bounds``, or ``unchecked``: under declared DP-SGD clipping, or a
    bias gradient that admits no counts of the batch, the identities do not hold and the shadow batches' counts
    are taken as they are)."""
    counts = counts_from_head(target, public, public_labels, shadows=shadows, refits=refits, seed=seed)
    if target.clip is not None:
        return counts, "unchecked"
    bounds = head_bounds(target, public)
    if not bounds.feasible:
        return counts, "unchecked"
    if bounds.admits(counts):
        return counts, "head"
    return counts_from_bounds(target.gradient[f"{target.head}.bias"], bounds), "bounds"
