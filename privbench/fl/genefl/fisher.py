"""Diagonal empirical Fisher of log p(y|x) and GENE-FL's elastic regulariser."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import nn

from privbench.data.dataset import ImageDataset
from privbench.fl.sgd import per_sample_gradients

#: Per-sample gradients held at once, in floats (512 MiB): caps the batch for large models.
MAX_FLOATS = 2**27


def squared_gradients(model: nn.Module, data: ImageDataset, *, batch_size: int = 256,
                      clip: float | None = None) -> dict[str, torch.Tensor]:
    """``sum_i g_i^2`` with ``g_i = d log p(y_i | x_i; theta) / d theta`` over the samples of ``data``.

    With ``clip``, each per-sample gradient is first scaled to L2 norm at most ``clip`` (over
    all parameters), so one sample changes the sum by at most ``clip^2`` in L2 norm. The model
    is evaluated in eval mode (BatchNorm uses running statistics, so samples stay independent);
    the sign of the log-likelihood's gradient does not matter once squared. Batches shrink
    so that their per-sample gradients fit ``MAX_FLOATS`` (ResNet-18: 11 samples at a time).
    """
    was_training = model.training
    model.eval()
    total = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    batch_size = max(1, min(batch_size, MAX_FLOATS // max(1, sum(p.numel() for p in total.values()))))
    for start in range(0, len(data), batch_size):
        stop = min(start + batch_size, len(data))
        grads = per_sample_gradients(model, data.normalised(slice(start, stop)), data.labels[start:stop], clip=clip)
        for k, g in grads.items():
            total[k] += (g.detach() ** 2).sum(0)
    model.train(was_training)
    return total


def fisher_diagonal(model: nn.Module, data: ImageDataset, *, batch_size: int = 256) -> dict[str, torch.Tensor]:
    """``F_j = mean_i (d log p(y_i | x_i; theta) / d theta_j)^2`` over the client's samples.

    Example:
        >>> fisher = fisher_diagonal(model, client_data)  # doctest: +SKIP
    """
    return {k: v / len(data) for k, v in squared_gradients(model, data, batch_size=batch_size).items()}


def elastic_weight(fisher: Mapping[str, torch.Tensor], eps: float) -> dict[str, torch.Tensor]:
    """``1[F_j >= eps] F_j``: the per-parameter weight of GENE-FL's elastic term."""
    return {n: torch.where(f >= eps, f, torch.zeros_like(f)) for n, f in fisher.items()}


def gene_penalty(params: Mapping[str, torch.Tensor], anchor: Mapping[str, torch.Tensor],
                 weight: Mapping[str, torch.Tensor], *, lambda1: float, lambda2: float) -> torch.Tensor:
    """``lambda1 * ||theta - Theta||^2 + lambda2 * sum_j weight_j (theta_j - Theta_j)^2`` over ``params``.

    Functional (parameters by name), so clients' penalties can be ``vmap``ped together.
    """
    total = torch.zeros(())
    for name, p in params.items():
        diff2 = (p - anchor[name]) ** 2
        if lambda1:
            total = total + lambda1 * diff2.sum()
        if lambda2:
            total = total + lambda2 * (weight[name] * diff2).sum()
    return total


def gene_regulariser(model: nn.Module, anchor: dict[str, torch.Tensor], fisher: dict[str, torch.Tensor], *,
                     lambda1: float, lambda2: float, eps: float) -> torch.Tensor:
    """``lambda1 * ||theta - Theta||^2 + lambda2 * sum_j 1[F_j >= eps] F_j (theta_j - Theta_j)^2``.

    The first term keeps the update smooth; the second pins high-Fisher parameters (the
    generalisable knowledge) while parameters with ``F_j < eps`` move freely.
    """
    weight = elastic_weight(fisher, eps) if lambda2 else {}
    return gene_penalty(dict(model.named_parameters()), anchor, weight, lambda1=lambda1, lambda2=lambda2)


@dataclass(frozen=True)
class GeneRegulariser:
    """GENE-FL's local penalty around the received model ``anchor`` (a ``Regulariser`` for trainers).

    Given ``anchor`` and ``fisher`` it reads no data, so DP-SGD adds its gradient after
    clipping and noise; the Fisher pass that made ``fisher`` is a read of its own
    (``Trainer.fisher``), exact or DP.
    """

    anchor: dict[str, torch.Tensor]
    fisher: dict[str, torch.Tensor]
    lambda1: float
    lambda2: float
    eps: float

    @cached_property
    def _tensors(self) -> dict[str, dict[str, torch.Tensor]]:
        return {"anchor": self.anchor, "weight": elastic_weight(self.fisher, self.eps) if self.lambda2 else {}}

    @cached_property
    def _coefficient(self) -> dict[str, torch.Tensor]:
        """``lambda1 + lambda2 w`` per parameter, as autograd sums the two terms' gradients (computed once)."""
        weight = self.tensors()["weight"]
        out = {}
        for name, anchor in self.anchor.items():
            if not self.lambda2:
                out[name] = torch.full_like(anchor, self.lambda1)
            elif not self.lambda1:
                out[name] = self.lambda2 * weight[name]
            else:
                out[name] = torch.full_like(anchor, self.lambda1) + self.lambda2 * weight[name]
        return out

    def tensors(self) -> dict[str, dict[str, torch.Tensor]]:
        """The client's own tensors of the penalty: the anchor and the elastic weights (computed once)."""
        return self._tensors

    def penalty(self, params: Mapping[str, torch.Tensor], tensors: dict[str, dict[str, torch.Tensor]]) -> torch.Tensor:
        """The penalty at ``params`` given ``tensors()`` (functional, for vmapped training)."""
        return gene_penalty(params, tensors["anchor"], tensors["weight"], lambda1=self.lambda1, lambda2=self.lambda2)

    def __call__(self, model: nn.Module) -> torch.Tensor:
        return self.penalty(dict(model.named_parameters()), self.tensors())

    def add_gradient_(self, model: nn.Module) -> None:
        """Add the penalty's gradient ``2 (lambda1 + lambda2 w) (theta - Theta)`` to each parameter's ``.grad``.

        Computed in autograd's order of operations (``(lambda1 + lambda2 w) * (2 (theta - Theta))``), so a
        step gets the same bits as backpropagating ``loss + self(model)``, without building the
        penalty's graph of some fifty small operations every step.
        """
        if not (self.lambda1 or self.lambda2):
            return
        with torch.no_grad():
            for name, p in model.named_parameters():
                grad = self._coefficient[name] * (2.0 * (p - self.anchor[name]))
                p.grad = grad if p.grad is None else p.grad + grad
