"""Clients of a round trained together: stacked parameters, one vmapped SGD step for all (``fl.vectorise``)."""
from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap

from privbench.data.dataset import ImageDataset


@dataclass(frozen=True)
class LocalJob:
    """One client's local training in a round.

    Attributes:
        model: the client's model, trained in place.
        data: the client's data this round.
        client: the client's name.
        generator: the client's batch-order generator.
        regulariser: a penalty added to the loss that reads no data (``Regulariser``), or None.
    """

    model: nn.Module
    data: ImageDataset
    client: str
    generator: torch.Generator
    regulariser: Any = None


def why_not_stacked(jobs: Sequence[LocalJob]) -> str | None:
    """Why these jobs cannot train as one stacked model (None when they can)."""
    first = jobs[0].model
    if any(True for _ in first.buffers()):
        return "the model has buffers (batch norm), which vmapped training cannot update per client"
    if any(isinstance(m, nn.modules.dropout._DropoutNd) for m in first.modules()):
        return "the model has dropout, whose random masks would differ from one-by-one training"
    shapes = [(n, p.shape) for n, p in first.named_parameters()]
    if any([(n, p.shape) for n, p in job.model.named_parameters()] != shapes for job in jobs[1:]):
        return "the clients' models differ in architecture"
    if any(getattr(job.regulariser, "step", "gradient") != "gradient" for job in jobs):
        return "a penalty taken by its proximal map (fl.penalty_step=proximal) trains one client at a time"
    if len({type(job.regulariser) for job in jobs}) > 1:
        return "the clients' regularisers differ"
    with_reg = [job.regulariser for job in jobs if job.regulariser is not None]
    if with_reg and len({tuple(sorted(r.settings().items())) for r in with_reg}) > 1:
        return "the clients' regulariser weights differ"
    return None


def _schedule(jobs: Sequence[LocalJob], *, epochs: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Per step and client, the sample rows of the concatenated data (padding points at a zero row) and weights.

    Each client draws its epoch orders from its own generator exactly as ``local_train`` does.
    Returns ``index [T, M, B]``, ``weight [T, M, B]`` (``1 / batch length``, 0 for padding)
    and each client's step count.
    """
    offsets, total = [], 0
    for job in jobs:
        offsets.append(total)
        total += len(job.data)
    pad = total  # the zero row appended after all clients' samples
    per_client: list[list[torch.Tensor]] = []
    for job, offset in zip(jobs, offsets):
        n, batches = len(job.data), []
        for _ in range(epochs):
            order = torch.randperm(n, generator=job.generator)
            batches += [order[s : s + batch_size] + offset for s in range(0, n, batch_size)]
        per_client.append(batches)
    steps = [len(b) for b in per_client]
    index = torch.full((max(steps), len(jobs), batch_size), pad, dtype=torch.long)
    weight = torch.zeros(max(steps), len(jobs), batch_size)
    for m, batches in enumerate(per_client):
        for t, rows in enumerate(batches):
            index[t, m, : len(rows)] = rows
            weight[t, m, : len(rows)] = 1.0 / len(rows)
    return index, weight, steps


def stacked_local_train(jobs: Sequence[LocalJob], *, epochs: int, lr: float, batch_size: int,
                        momentum: float = 0.0) -> list[int]:
    """Train every job's model in place with SGD, all clients in one vmapped step; return each one's step count.

    Equal to ``local_train`` on each job alone, within float tolerance: the same batches (each
    client's own generator), the mean loss of a batch as a weighted sum with padding weighted
    0, SGD with momentum as ``torch.optim.SGD``; a client that has taken all its steps stops
    moving while the others go on. Call ``why_not_stacked`` first.
    """
    base = copy.deepcopy(jobs[0].model).to("meta")
    base.train()
    params, _ = stack_module_state([job.model for job in jobs])
    params = {n: p.detach() for n, p in params.items()}
    device = next(jobs[0].model.parameters()).device
    images = torch.cat([job.data.normalised() for job in jobs] + [torch.zeros(1, *jobs[0].data.shape, device=device)])
    labels = torch.cat([job.data.labels for job in jobs] + [torch.zeros(1, dtype=torch.long, device=device)])
    index, weight, steps = _schedule(jobs, epochs=epochs, batch_size=batch_size)
    index, weight = index.to(device), weight.to(device)
    regulariser = jobs[0].regulariser
    extra = ({k: {n: torch.stack([job.regulariser.tensors()[k][n] for job in jobs]) for n in v}
              for k, v in regulariser.tensors().items()} if regulariser is not None else {})

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor,
             tensors: dict[str, dict[str, torch.Tensor]]) -> torch.Tensor:
        value = (F.cross_entropy(functional_call(base, p, (x,)), y, reduction="none") * w).sum()
        return value + regulariser.penalty(p, tensors) if regulariser is not None else value

    step_grad = vmap(grad(loss))
    velocity: dict[str, torch.Tensor] = {}
    taken = torch.tensor(steps, device=device)
    for t in range(index.shape[0]):
        rows = index[t]
        grads = step_grad(params, images[rows], labels[rows], weight[t], extra)
        active = t < taken
        for n, g in grads.items():
            if momentum:
                velocity[n] = g if t == 0 else momentum * velocity[n] + g
                g = velocity[n]
            keep = active.view(-1, *[1] * (g.dim() - 1))
            params[n] = torch.where(keep, params[n] - lr * g, params[n])
    with torch.no_grad():
        for m, job in enumerate(jobs):
            for n, p in job.model.named_parameters():
                p.copy_(params[n][m])
    return steps

