"""Candidate gradients (one step or unrolled) and the L-BFGS gradient-matching loop of DLG and iDLG."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch.func import functional_call

from privbench.attacks.reconstruction.lbfgs import LBFGS
from privbench.attacks.reconstruction.objectives import squared_l2, squared_norm
from privbench.attacks.target import AttackTarget, Unroll

#: A step that moves no leaf and changes the objective by at most this (relative) ends the loop.
TOLERANCE = 1e-9
#: With ``patience``: an attempt whose objective fell by less than this fraction over the last
#: ``patience`` iterations ends as ``plateau``.
PLATEAU = 0.01


def candidate_loss(out: torch.Tensor, labels: torch.Tensor | None, label_logits: torch.Tensor | None) -> torch.Tensor:
    """Mean cross-entropy of ``out`` against hard ``labels``, or DLG's soft-label one against ``label_logits``."""
    if labels is not None:
        return F.cross_entropy(out, labels)
    assert label_logits is not None, "either labels or label_logits"
    return torch.mean(torch.sum(-F.softmax(label_logits, dim=-1) * F.log_softmax(out, dim=-1), dim=-1))


def candidate_gradient(target: AttackTarget, images: torch.Tensor, *, labels: torch.Tensor | None = None,
                       label_logits: torch.Tensor | None = None,
                       schedule: list[list[slice]] | None = None) -> dict[str, torch.Tensor]:
    """What the payload would show for candidate data, differentiable w.r.t. the candidate.

    Hard ``labels`` give mean cross-entropy; ``label_logits`` give DLG's soft-label
    cross-entropy. Without ``target.unroll`` this is one gradient at the base model; with it,
    the client's local SGD is replayed on the candidates (``torch.func.functional_call``,
    ``create_graph=True``) and the result is the pseudo-gradient ``-(delta)/(lr * steps)``,
    the same transform the observed payload went through. ``schedule`` gives each part's SGD steps as
    candidate slices (default: ``Part.batches``, the part's images in order every epoch).
    """
    target.evaluations += 1
    if target.unroll is None:
        if target.clip is not None:
            every = dict(target.model.named_parameters())
            mean = clipped_mean_gradient(lambda x: target.model(x), every, images, labels, label_logits, target.clip)
            return {n: mean[n] for n in target.gradient}
        params = target.params()
        loss = candidate_loss(target.model(images), labels, label_logits)
        grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
        return dict(zip(params, grads))
    spec = target.unroll
    start = {n: p.detach() for n, p in target.model.named_parameters()}
    total: dict[str, torch.Tensor] = {}
    weight: dict[str, float] = {}
    for k, part in enumerate(spec.parts):
        batches = part.batches() if schedule is None else schedule[k]
        end = _replay(target, spec, start, images, labels, label_logits, batches)
        for n in target.gradient:
            if part.names is None or n in part.names:
                total[n] = total.get(n, 0) + part.weight * (end[n] - start[n])
                weight[n] = weight.get(n, 0.0) + part.weight
    scale = spec.lr * spec.steps
    return {n: -(total[n] / weight[n]) / scale if n in total else torch.zeros_like(start[n]) for n in target.gradient}


def clipped_mean_gradient(forward: Callable[[torch.Tensor], torch.Tensor], params: Mapping[str, torch.Tensor],
                          images: torch.Tensor, labels: torch.Tensor | None, label_logits: torch.Tensor | None,
                          clip: float) -> dict[str, torch.Tensor]:
    """DP-SGD's view of a batch without its noise: each sample's gradient over all ``params`` scaled to L2 norm at
    most ``clip`` (factor ``min(1, C / (norm + 1e-6))``, as Opacus and ``fl.sgd.per_sample_gradients``), averaged;
    differentiable w.r.t. the candidates.
    """
    names, total = list(params), None
    for i in range(len(images)):
        one = slice(i, i + 1)
        loss = candidate_loss(forward(images[one]), None if labels is None else labels[one],
                              None if label_logits is None else label_logits[one])
        grads = torch.autograd.grad(loss, [params[n] for n in names], create_graph=True, allow_unused=True)
        grads = tuple(torch.zeros_like(params[n]) if g is None else g for n, g in zip(names, grads))
        norm = torch.sqrt(torch.stack([(g * g).sum() for g in grads]).sum())
        factor = torch.clamp(clip / (norm + 1e-6), max=1.0)
        scaled = [g * factor for g in grads]
        total = scaled if total is None else [t + g for t, g in zip(total, scaled)]
    assert total is not None, "a batch has at least one candidate"
    return {n: t / len(images) for n, t in zip(names, total)}


def elastic_weights(target: AttackTarget, start: dict[str, torch.Tensor], images: torch.Tensor,
                    labels: torch.Tensor | None, label_logits: torch.Tensor | None, eps: float) -> dict[str, torch.Tensor]:
    """GENE-FL's elastic weights ``1[F_j >= eps] F_j`` with ``F`` the diagonal empirical Fisher of the candidates at the
    received model (``privbench.fl.fisher``), differentiable w.r.t. the candidates (the indicator is not)."""
    params = {n: p.detach().requires_grad_(True) for n, p in start.items()}
    names, total = list(params), None
    was = target.model.training
    target.model.eval()  # the client's Fisher pass runs in eval mode
    for i in range(len(images)):
        one = slice(i, i + 1)
        loss = candidate_loss(functional_call(target.model, params, (images[one],)),
                              None if labels is None else labels[one],
                              None if label_logits is None else label_logits[one])
        grads = torch.autograd.grad(loss, [params[n] for n in names], create_graph=True, allow_unused=True)
        squared = [torch.zeros_like(params[n]) if g is None else g * g for n, g in zip(names, grads)]
        total = squared if total is None else [t + g for t, g in zip(total, squared)]
    target.model.train(was)
    assert total is not None, "a part has at least one candidate"
    return {n: torch.where(f.detach() >= eps, f, torch.zeros_like(f)) for n, f in
            ((n, t / len(images)) for n, t in zip(names, total))}


def _replay(target: AttackTarget, spec: Unroll, start: dict[str, torch.Tensor], images: torch.Tensor,
            labels: torch.Tensor | None, label_logits: torch.Tensor | None, batches: list[slice]) -> dict[str, torch.Tensor]:
    """SGD (with momentum, the smooth-update term and, where declared, the Fisher-elastic term: by its gradient or,
    with ``proximal_step``, its proximal map after each step) over ``batches`` of the candidates, differentiably."""
    params = {n: p.clone().requires_grad_(True) for n, p in start.items()}
    velocity = {n: torch.zeros_like(p) for n, p in params.items()}
    names = list(params)
    elastic: dict[str, torch.Tensor] = {}
    lambda2 = spec.elastic[0] if spec.elastic is not None else 0.0
    if spec.elastic is not None:  # the Fisher of the part's data: each candidate once
        seen = sorted({i for b in batches for i in range(b.start, b.stop)})
        rows = torch.tensor(seen, device=images.device)
        elastic = elastic_weights(target, start, images[rows], None if labels is None else labels[rows],
                                  None if label_logits is None else label_logits[rows], spec.elastic[1])
    for batch in batches:
        sub_labels = labels[batch] if labels is not None else None
        sub_logits = label_logits[batch] if label_logits is not None else None
        if target.clip is None:
            loss = candidate_loss(functional_call(target.model, params, (images[batch],)), sub_labels, sub_logits)
            if spec.proximal and not spec.proximal_step:
                loss = loss + spec.proximal * sum(((params[n] - start[n]) ** 2).sum() for n in names)
            grads = torch.autograd.grad(loss, [params[n] for n in names], create_graph=True, allow_unused=True)
        else:  # DP-SGD: per-sample clipped mean; the data-independent penalty is added outside the clipping
            current = params
            mean = clipped_mean_gradient(lambda x: functional_call(target.model, current, (x,)), params,
                                         images[batch], sub_labels, sub_logits, target.clip)
            grads = tuple(mean[n] + (2 * spec.proximal * (params[n] - start[n])
                                     if spec.proximal and not spec.proximal_step else 0) for n in names)
        new = {}
        for n, g in zip(names, grads):
            g = torch.zeros_like(params[n]) if g is None else g
            if elastic and not spec.proximal_step:  # data-dependent, so DP-SGD would add it after clipping too
                g = g + 2 * lambda2 * elastic[n] * (params[n] - start[n])
            velocity[n] = spec.momentum * velocity[n] + g if spec.momentum else g
            new[n] = params[n] - spec.lr * velocity[n]
            if spec.proximal_step:  # the penalty's proximal map, as GeneRegulariser.after_step_ takes it
                scale = 2 * spec.lr * (spec.proximal + (lambda2 * elastic[n] if elastic else 0))
                new[n] = (new[n] + scale * start[n]) / (1 + scale)
        params = new
    return params


def lbfgs_match(leaves: list[torch.Tensor], gradient_of: Callable[[], dict[str, torch.Tensor]], target: AttackTarget,
                *, iterations: int, converged: float, stall_at: float, stall_tol: float, patience: int = 0,
                on_step: Callable[[float], None] | None = None) -> tuple[float, str, int]:
    """Minimise the squared-L2 gradient distance over ``leaves`` with L-BFGS.

    An outer step runs L-BFGS (``attacks.reconstruction.lbfgs``: torch's rules, a cheaper direction) for up to
    20 evaluations and stops early at torch's tolerances.
    The loop ends as ``stationary`` when a step changes neither the objective (relative
    ``TOLERANCE``) nor any leaf (``TOLERANCE``): from then on every step would repeat itself,
    so a converged attempt does not spend the rest of its budget. With ``patience`` > 0 it ends
    as ``plateau`` when the objective fell by less than ``PLATEAU`` (1 %) over the last
    ``patience`` iterations.

    Returns:
        ``(relative objective, status, iterations)``; status is ``converged``, ``stationary``,
        ``plateau``, ``budget``, ``stalled`` (still above ``stall_tol`` after ``stall_at`` of the
        budget) or ``nan``.
    """
    scale = max(squared_norm(target.gradient), 1e-30)
    optimizer = LBFGS(leaves, lr=1.0, max_iter=20, history_size=100)
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
    previous = math.inf
    trace: list[float] = []
    for it in range(1, iterations + 1):
        before = [leaf.detach().clone() for leaf in leaves]
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
        trace.append(value)
        if patience and it > patience and value > (1 - PLATEAU) * trace[-patience - 1]:
            return value, "plateau", it
        moved = max(float((leaf.detach() - b).abs().max()) for leaf, b in zip(leaves, before))
        if moved <= TOLERANCE and abs(previous - value) <= TOLERANCE * max(abs(value), 1e-30):
            return value, "stationary", it
        previous = value
    return last[0], "budget", iterations
