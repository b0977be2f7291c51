"""Shadow client-rounds: many copies of one client's declared local training, run as one stacked model.

A membership attack that calibrates by shadows (LiRA, Carlini et al., 2022) trains, from the weights the
victim started from, the same local training on datasets the attacker assembles. ``train_shadows`` runs
``K`` of them at once with ``StackedModel`` (every parameter ``[K, *shape]``, shadow ``k``'s batch ``[B]``
of its own data; one autograd pass gives every shadow its own mean-batch gradient): SGD with momentum as
``torch.optim.SGD``, each shadow reshuffling its data every epoch, the last batch of an epoch shorter, and
GENE-FL's penalty (``lambda1 ||theta - Theta||^2 + lambda2 sum_j 1[F_j >= eps] F_j (theta_j - Theta_j)^2``)
with each shadow's own Fisher of its own data at the received model.

Example:
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    >>> x, y = torch.randn(6, 1, 2, 2), torch.tensor([0, 1, 2, 0, 1, 2])
    >>> plan = ShadowTraining(lr=0.1, epochs=1, batch_size=6)
    >>> base = {n: p.detach() for n, p in model.named_parameters()}
    >>> out = train_shadows(model, base, plan, x, y, torch.tensor([[0, 1, 2, 3, 4, 5]]), torch.Generator())
    >>> loss = torch.nn.functional.cross_entropy(model(x), y)
    >>> g = torch.autograd.grad(loss, list(model.parameters()))
    >>> torch.allclose(out["1.weight"][0], base["1.weight"] - 0.1 * g[0], atol=1e-6)
    True
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from privbench.attacks.reconstruction.stacked import StackedModel
from privbench.errors import AttackNotApplicableError
from privbench.payloads import LocalTraining
from privbench.progress import phase


@dataclass(frozen=True)
class ShadowTraining:
    """The local training a shadow repeats (from the victim's declared record).

    Attributes:
        lr: SGD learning rate.
        epochs: local epochs.
        batch_size: local batch size.
        momentum: SGD momentum.
        lambda1: weight of the data-independent ``||theta - Theta||^2`` term (GENE-FL's smooth update; 0: none).
        lambda2: weight of GENE-FL's Fisher-elastic term (0: none).
        eps: the elastic term's Fisher threshold.
        proximal_step: the penalty is taken by its proximal map after each step (``fl.penalty_step=proximal``).
    """

    lr: float
    epochs: int
    batch_size: int
    momentum: float = 0.0
    lambda1: float = 0.0
    lambda2: float = 0.0
    eps: float = 0.0
    proximal_step: bool = False

    @classmethod
    def of(cls, training: LocalTraining) -> "ShadowTraining":
        """The shadow of a one-client training record; refused in one line where shadows cannot repeat it."""
        if training.parts:
            raise AttackNotApplicableError("shadow training of an aggregate (its other clients' rounds) is not built; "
                                           "attack one client's upload")
        if training.clip is not None:
            raise AttackNotApplicableError("the record declares DP-SGD (clip norm C): shadows do not repeat its "
                                           "sampling and noise; use attack=membership")
        known = {"lambda1", "lambda2", "eps", "proximal_step"}
        if set(training.penalty) - known:
            raise AttackNotApplicableError(f"the record's penalty {sorted(training.penalty)} is not one shadows repeat")
        lambda1 = float(training.penalty.get("lambda1", training.proximal))
        return cls(float(training.lr), int(training.epochs), int(training.batch_size), float(training.momentum),
                   lambda1, float(training.penalty.get("lambda2", 0.0)), float(training.penalty.get("eps", 0.0)),
                   bool(training.penalty.get("proximal_step", 0.0)))

    def steps(self, samples: int) -> int:
        """Optimiser steps on ``samples`` records: ``epochs * ceil(samples / batch_size)``."""
        return self.epochs * math.ceil(samples / self.batch_size)

    def describe(self) -> dict[str, Any]:
        """JSON-ready settings."""
        return {"lr": self.lr, "epochs": self.epochs, "batch_size": self.batch_size, "momentum": self.momentum,
                "lambda1": self.lambda1, "lambda2": self.lambda2, "eps": self.eps, "proximal_step": self.proximal_step}


def train_shadows(model: nn.Module, base: Mapping[str, torch.Tensor], plan: ShadowTraining, images: torch.Tensor,
                  labels: torch.Tensor, datasets: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Each shadow's parameters (``[K, *shape]`` by name) after ``plan`` from ``base`` on its rows of ``images``.

    ``datasets`` is ``[K, N]``: shadow ``k`` trains on ``images[datasets[k]]`` (normalised, model input space)
    with ``labels``; its batch orders come from ``generator``. ``model`` must run stacked (no batch norm).
    """
    shadows, samples = datasets.shape
    device = images.device
    start = {n: base[n].detach().to(device) for n, _ in model.named_parameters()}
    params = {n: p.unsqueeze(0).repeat(shadows, *[1] * p.dim()) for n, p in start.items()}
    stack = StackedModel.from_stacked(model, params)
    names = list(stack.params)
    weight = _elastic(model, start, plan, images, labels, datasets) if plan.lambda2 else {}
    coefficient = {n: plan.lambda1 + plan.lambda2 * weight[n] if weight else torch.full_like(params[n], plan.lambda1)
                   for n in names}
    penalised = bool(plan.lambda1 or plan.lambda2)
    velocity: dict[str, torch.Tensor] = {}
    stack.module.train()
    with phase(f"shadow training ({shadows} shadows at once)", total=plan.steps(samples), unit="step") as bar:
        for _ in range(plan.epochs):
            order = torch.argsort(torch.rand(shadows, samples, generator=generator), dim=1).to(device)
            for first in range(0, samples, plan.batch_size):
                rows = datasets.gather(1, order[:, first:first + plan.batch_size])
                stack.params = {n: params[n].requires_grad_(True) for n in names}
                out = stack(images[rows])
                # sum over shadows of each one's mean batch loss: shadow k's gradient is the k-th slice
                loss = F.cross_entropy(out.flatten(0, 1), labels[rows].flatten(), reduction="sum") / rows.shape[1]
                grads = torch.autograd.grad(loss, [stack.params[n] for n in names])
                with torch.no_grad():
                    for n, g in zip(names, grads):
                        p = params[n].detach()
                        if penalised and not plan.proximal_step:
                            g = g + coefficient[n] * (2.0 * (p - start[n]))
                        if plan.momentum:
                            g = velocity[n] = g if n not in velocity else plan.momentum * velocity[n] + g
                        params[n] = p - plan.lr * g
                        if penalised and plan.proximal_step:  # as GeneRegulariser.after_step_ takes it
                            scale = 2.0 * plan.lr * coefficient[n]
                            params[n] = (params[n] + scale * start[n]) / (1.0 + scale)
                bar.update(1)
    return {n: p.detach() for n, p in params.items()}


def _elastic(model: nn.Module, start: dict[str, torch.Tensor], plan: ShadowTraining, images: torch.Tensor,
             labels: torch.Tensor, datasets: torch.Tensor, chunk: int = 128) -> dict[str, torch.Tensor]:
    """Each shadow's elastic weight ``1[F_j >= eps] F_j`` with ``F`` the diagonal empirical Fisher of its data at the
    received model (eval mode, each record once, as ``privbench.fl.fisher``): one per-record pass over every record
    any shadow holds, then ``F_k = mean over shadow k's records`` as a product with the shadows' membership matrix."""
    rows = datasets.unique()
    share = torch.zeros(datasets.shape[0], len(rows), device=images.device)
    position = torch.searchsorted(rows, datasets)
    share.scatter_add_(1, position, torch.full(datasets.shape, 1.0 / datasets.shape[1], device=images.device))
    was = model.training
    model.eval()

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, p, (x.unsqueeze(0),)), y.unsqueeze(0))

    per_record = vmap(grad(loss), in_dims=(None, 0, 0))
    fisher = {n: torch.zeros(datasets.shape[0], *p.shape, device=images.device) for n, p in start.items()}
    with phase("shadows' Fisher diagonals", total=math.ceil(len(rows) / chunk), unit="chunk") as bar:
        for first in range(0, len(rows), chunk):
            these = rows[first:first + chunk]
            squared = per_record(start, images[these], labels[these])
            for n, g in squared.items():
                fisher[n] += (share[:, first:first + chunk] @ (g * g).flatten(1)).view_as(fisher[n])
            bar.update(1)
    model.train(was)
    return {n: torch.where(f >= plan.eps, f, torch.zeros_like(f)) for n, f in fisher.items()}
