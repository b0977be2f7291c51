"""Label recovery from the classifier head's gradient (the iDLG rule and its batch extension)."""
from __future__ import annotations

import torch

from privbench.attacks.target import AttackTarget


def recover_labels(head_weight_grad: torch.Tensor, num_images: int) -> torch.Tensor:
    """Labels from the gradient of the last linear layer's weight ``[classes, features]``.

    With softmax cross-entropy, row ``i`` of the weight gradient is
    ``mean_b (p_bi - y_bi) * h_b``; with non-negative features ``h`` (sigmoid, ReLU) only
    rows of classes present in the batch can sum below zero. For one image this is iDLG's
    rule, ``argmin_i sum_j dW_ij`` (Zhao et al., 2020). For a batch, the classes whose rows
    sum below zero are taken, most negative first; if there are fewer such classes than
    images (repeated labels), the most negative classes are repeated.

    Example:
        >>> g = torch.tensor([[0.2, 0.1], [-0.5, -0.3], [0.3, 0.2]])
        >>> recover_labels(g, 1)
        tensor([1])
    """
    sums = head_weight_grad.sum(dim=1)
    order = torch.argsort(sums)
    if num_images == 1:
        return order[:1]
    negative = order[sums[order] < 0]
    if len(negative) == 0:
        negative = order[:1]
    if len(negative) >= num_images:
        return negative[:num_images]
    repeats = negative.repeat((num_images + len(negative) - 1) // len(negative))
    return torch.sort(repeats[:num_images]).values


def known_labels(target: AttackTarget) -> torch.Tensor | None:
    """A gradient view's candidate labels: the recovered counts' where set (``labels.counts.with_counted_labels``),
    else the head gradient's sign rule (``recover_labels``), else None (the head is hidden: optimise them jointly)."""
    if target.labels is not None:
        return target.labels
    head = target.head_gradient
    return None if head is None else recover_labels(head, target.num_images)
