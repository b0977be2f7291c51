"""GENE-FL's Fisher-elastic penalty around the received model (the Fisher itself: ``privbench.fl.fisher``)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import nn

from privbench.errors import ConfigError

#: How a client takes the penalty each SGD step: ``gradient`` (the paper: its gradient joins the loss's) or
#: ``proximal`` (after the loss's step, the penalty's exact proximal map, stable at any learning rate).
PENALTY_STEPS = ("gradient", "proximal")


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
    step: str = "gradient"

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

    def settings(self) -> dict[str, float]:
        """The declared weights: ``lambda1``, ``lambda2`` and the Fisher threshold ``eps`` (and ``proximal_step``
        1.0 where the penalty is taken by its proximal map)."""
        return penalty_settings(self.lambda1, self.lambda2, self.eps, self.step)

    def proximal(self) -> float:
        """``lambda1``: the smooth-update term ``lambda1 ||theta - Theta||^2`` reads no data."""
        return float(self.lambda1)

    def add_gradient_(self, model: nn.Module) -> None:
        """Add the penalty's gradient ``2 (lambda1 + lambda2 w) (theta - Theta)`` to each parameter's ``.grad``.

        Computed in autograd's order of operations (``(lambda1 + lambda2 w) * (2 (theta - Theta))``), so a
        step gets the same bits as backpropagating ``loss + self(model)``, without building the
        penalty's graph of some fifty small operations every step.
        """
        if not (self.lambda1 or self.lambda2) or self.step != "gradient":
            return
        with torch.no_grad():
            for name, p in model.named_parameters():
                grad = self._coefficient[name] * (2.0 * (p - self.anchor[name]))
                p.grad = grad if p.grad is None else p.grad + grad

    def after_step_(self, model: nn.Module, lr: float) -> None:
        """With ``step=proximal``: move each parameter to the penalty's proximal point after the loss's step,
        ``theta <- (theta + 2 lr c Theta) / (1 + 2 lr c)`` with ``c = lambda1 + lambda2 w`` (the minimiser of
        ``c (theta' - Theta)^2 + (theta' - theta)^2 / (2 lr)``); nothing with ``step=gradient``."""
        if not (self.lambda1 or self.lambda2) or self.step != "proximal":
            return
        with torch.no_grad():
            for name, p in model.named_parameters():
                scale = 2.0 * lr * self._coefficient[name]
                p.copy_((p + scale * self.anchor[name]) / (1.0 + scale))

    def check_stable(self, *, lr: float, momentum: float, client: str) -> None:
        """Refuse, in one line, a gradient step that does not converge on the penalty alone: with its curvature
        ``2 c``, heavy-ball SGD's iteration on a parameter's distance from the anchor has a root of modulus at least 1
        where ``lr c >= 1 + momentum`` (plain SGD: ``|1 - 2 lr c| >= 1``), whatever the loss does."""
        if self.step != "gradient" or not (self.lambda1 or self.lambda2):
            return
        name, top = max(((n, float(c.max())) for n, c in self._coefficient.items()), key=lambda t: t[1])
        if lr * top >= 1.0 + momentum:
            raise ConfigError(
                f"fl.lr={lr:g}: {client}'s penalty has curvature 2 (lambda1 + lambda2 F) = {2 * top:.3g} on {name} "
                f"(its Fisher on the received model), and SGD on that quadratic alone does not converge where lr "
                f"(lambda1 + lambda2 F) >= 1 + momentum ({lr * top:.4g} here); set fl.penalty_step=proximal (the "
                f"penalty's exact proximal map, stable at any lr), or lower fl.lr below {(1.0 + momentum) / top:.4g}, "
                f"fl.lambda1 or fl.lambda2")


def penalty_settings(lambda1: float, lambda2: float, eps: float, step: str) -> dict[str, float]:
    """The penalty's declared settings as a training record holds them (``proximal_step`` only where 1.0)."""
    declared = {"lambda1": float(lambda1), "lambda2": float(lambda2), "eps": float(eps)}
    return {**declared, "proximal_step": 1.0} if step == "proximal" else declared
