"""Candidate gradients and the L-BFGS gradient-matching loop shared by DLG and iDLG."""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attacks.objectives import squared_l2, squared_norm
from attacks.target import AttackTarget


def candidate_gradient(target: AttackTarget, images: torch.Tensor, *, labels: torch.Tensor | None = None,
                       label_logits: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Gradient of the client's loss on candidate data, differentiable w.r.t. the candidate.

    Hard ``labels`` give mean cross-entropy; ``label_logits`` give DLG's soft-label
    cross-entropy ``mean_b sum_i -softmax(l_b)_i log p_bi``.
    """
    out = target.model(images)
    if labels is not None:
        loss = F.cross_entropy(out, labels)
    else:
        loss = torch.mean(torch.sum(-F.softmax(label_logits, dim=-1) * F.log_softmax(out, dim=-1), dim=-1))
    params = target.params()
    grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
    return dict(zip(params, grads))


def lbfgs_match(
    leaves: list[torch.Tensor],
    gradient_of: Callable[[], dict[str, torch.Tensor]],
    target: AttackTarget,
    *,
    iterations: int,
    converged: float,
    stall_at: float,
    stall_tol: float,
    on_step: Callable[[float], None] | None = None,
) -> tuple[float, str, int]:
    """Minimise the squared-L2 gradient distance over ``leaves`` with L-BFGS.

    Returns:
        ``(relative objective, status, iterations)``; status is ``converged``, ``budget``,
        ``stalled`` (still above ``stall_tol`` after ``stall_at`` of the budget) or ``nan``.
    """
    scale = max(squared_norm(target.gradient), 1e-30)
    optimizer = torch.optim.LBFGS(leaves, lr=1.0, max_iter=20, history_size=100)
    last = [math.inf]

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = squared_l2(gradient_of(), target.gradient)
        grads = torch.autograd.grad(loss, leaves)
        for leaf, grad in zip(leaves, grads):
            leaf.grad = grad
        last[0] = float(loss.detach()) / scale
        return loss

    check = max(1, int(stall_at * iterations))
    for it in range(1, iterations + 1):
        optimizer.step(closure)
        value = last[0]
        if on_step is not None:
            on_step(value)
        if not math.isfinite(value) or any(not torch.isfinite(leaf).all() for leaf in leaves):
            return math.nan, "nan", it
        if value < converged:
            return value, "converged", it
        if it == check and value > stall_tol:
            return value, "stalled", it
    return last[0], "budget", iterations
