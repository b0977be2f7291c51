"""SME, the Surrogate Model Extension (Zhu, Yao and Blaschko, "Surrogate Model Extension (SME): A Fast and Accurate
Weight Update Attack on Federated Learning", ICML 2023).

A client's multi-step update moves its model from ``theta_0`` to ``theta_T`` along a path the server does not see.
SME matches the update's direction with one full-batch gradient of all the client's candidate images taken at a
surrogate model on the segment, ``theta_0 + alpha (theta_T - theta_0)``, and learns ``alpha`` with the images: the
objective is ``1 - cos`` between that gradient and ``theta_0 - theta_T`` over every carried parameter, plus total
variation. No replay of the local steps, so no batch order and one gradient per step of the attack.

As the reference code's CNN configs (github.com/JunyiZhu-AI/surrogate_model_extension): Adam on the images (lr 1)
and on ``alpha`` (lr 1e-3, from 0.5, kept in [0, 1]; ``alpha=0`` is Inverting Gradients at ``theta_0``, the paper's
baseline), both steps divided by ten at ``iterations // 2.667``, ``// 1.6`` and ``// 1.142``, its total variation at
weight 0.01, images kept in the valid pixel box. Ours, not the reference code's: the labels are the per-class counts
the update's head bias gives away (the paper assumes them recovered separately; ``attack.labels=oracle`` hands the
true ones over as a control); parameters the message does not carry stay at ``theta_0`` in the surrogate; under a
DP-SGD record (clip norm C) the surrogate's gradient is DP-SGD's noiseless view, each candidate's gradient clipped
to C before the mean; an aggregate (several clients' updates) is refused before training.
"""
from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar

import numpy as np
import torch
from torch.func import functional_call

from privbench.attacks.labels.views import LabelView
from privbench.attacks.reconstruction.base import Attempt, GradientInversion
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.attacks.reconstruction.matching import candidate_loss, clipped_mean_gradient
from privbench.attacks.reconstruction.objectives import cosine_distance, total_variation
from privbench.attacks.reconstruction.update_labels import (
    LABELS,
    counts_shown,
    counts_source,
    laid_out,
    update_counts,
)
from privbench.attacks.target import AttackTarget
from privbench.attacks.views import ViewKind
from privbench.errors import AttackNotApplicableError
from privbench.payloads import kind as payload_kind
from privbench.payloads.kinds import Carries
from privbench.schema import Fraction, Iterations, Number, PositiveInt, PublicImages, Rate, Restarts, Switch, Weight

#: The reference code's divisors of the iterations where both steps are divided by ten (``iters // 2.667`` etc.).
DECAY_AT = (2.667, 1.6, 1.142)


class SME(GradientInversion):
    """Rebuild a client's images from its multi-step update with one gradient at a learned surrogate model.

    Args:
        iterations: Adam steps per attempt.
        restarts: attempts; the lowest final objective wins.
        lr: Adam learning rate on the images.
        alpha: the surrogate's starting place on the segment (0: ``theta_0``, Inverting Gradients; 1: ``theta_T``);
            learned only strictly between 0 and 1, as the reference code.
        alpha_lr: Adam learning rate on ``alpha``.
        tv: weight of total variation.
        decay: divide both learning rates by ten at ``iterations // 2.667``, ``// 1.6`` and ``// 1.142``.
        points: models along the update at which the label counts' prior is estimated (1: the received model).
        public: labelled test-split images (no client holds them) for the label counts.
        max_images: most client images rebuilt at once.
        labels: ``counts`` (recovered from the update) or ``oracle`` (the batch's true counts: a control row).
    """

    name = "sme"
    reads: ClassVar[frozenset[Carries]] = frozenset({"model"})
    view: ClassVar[ViewKind] = "labels"

    def __init__(self, *, iterations: Iterations = 1000, restarts: Restarts = 1, lr: Rate = 1.0, alpha: Fraction = 0.5,
                 alpha_lr: Rate = 1e-3, tv: Weight = 0.01, decay: Switch = True,
                 points: Annotated[int, Number(integer=True, low=1, high=10**4)] = 8, public: PublicImages = 2000,
                 max_images: PositiveInt = 128, labels: str = "counts") -> None:
        super().__init__(iterations=iterations, restarts=restarts, converged=0.0, stall_at=1.0, stall_tol=math.inf,
                         unroll=True, max_images=max_images)
        if labels not in LABELS:
            raise ValueError(f"attack.labels must be one of {', '.join(LABELS)}")
        self.lr, self.alpha, self.alpha_lr, self.tv, self.decay = lr, alpha, alpha_lr, tv, decay
        self.points, self.public, self.labels = points, public, labels
        self._counts: np.ndarray | None = None
        self._alphas: list[float] = []

    def attack(self, view: LabelView, *, seed: int) -> Reconstruction:  # type: ignore[override]
        target = view.target
        if target.unroll is None:
            raise AttackNotApplicableError(f"attack={self.name} places its surrogate on the client's update: "
                                           f"{target.knowledge.get('payload')} declares no local training")
        if len(target.unroll.parts) > 1:
            raise AttackNotApplicableError(f"attack={self.name} reads one client's update; "
                                           f"{target.knowledge.get('payload')} averages {len(target.unroll.parts)}")
        self._counts, self._alphas = update_counts(view, labels=self.labels, points=self.points), []
        found = super().attack(target, seed=seed)
        found.info["label_counts"] = counts_shown(self._counts)
        found.info["alpha"] = self._alphas
        for entry, alpha in zip(found.attempts, self._alphas):  # each attempt's learned alpha, in the run's metrics
            entry["alpha"] = alpha
        return found

    def cannot_read(self, kind: str) -> str | None:
        reason = super().cannot_read(kind)
        if reason is None and payload_kind(kind).aggregate:
            return f"attack={self.name} reads one client's update; a {kind} averages several clients'"
        return reason

    def label_source(self, target: AttackTarget) -> str:
        return counts_source(self._counts, self.labels)

    def attempt(self, target: AttackTarget, *, generator: torch.Generator) -> Attempt:
        assert target.unroll is not None
        n = target.num_images
        images = target.randn(n, *target.image_shape, generator=generator)
        target.clamp_(images)
        images.requires_grad_(True)
        labels = logits = None
        if self._counts is not None:
            labels = torch.from_numpy(laid_out(self._counts, generator)).to(target.device)
        else:
            logits = target.randn(n, target.num_classes, generator=generator).requires_grad_(True)
        alpha = torch.tensor(float(self.alpha), device=target.device, requires_grad=True)  # the surrogate's leaf
        optimisers = [torch.optim.Adam([images] + ([logits] if logits is not None else []), lr=self.lr)]
        optimisers += [torch.optim.Adam([alpha], lr=self.alpha_lr)] if 0 < self.alpha < 1 else []  # else fixed
        milestones = [int(self.iterations // d) for d in DECAY_AT] if self.decay else []
        schedulers = [torch.optim.lr_scheduler.MultiStepLR(o, milestones=milestones, gamma=0.1) for o in optimisers]
        start = {k: p.detach() for k, p in target.model.named_parameters()}
        names = list(target.gradient)
        scale = target.unroll.lr * target.unroll.steps  # theta_T = theta_0 - scale * pseudo-gradient
        value = math.inf
        with self.progress(desc=self.name) as bar:
            for it in range(1, self.iterations + 1):
                for o in optimisers:
                    o.zero_grad()
                loss = self.objective(target, images, labels, logits, alpha, start, names, scale)
                loss.backward()
                for o in optimisers:
                    o.step()
                with torch.no_grad():
                    target.clamp_(images)
                    alpha.clamp_(0.0, 1.0)
                for s in schedulers:
                    s.step()
                value = float(loss.detach())
                bar.update(1, objective=value)
                if not math.isfinite(value) or not torch.isfinite(images).all():
                    self._alphas.append(float(alpha.detach()))
                    return Attempt(images.detach(), torch.zeros(n, dtype=torch.long), math.nan, "nan", it)
        self._alphas.append(float(alpha.detach()))
        found = labels if labels is not None else logits.detach().argmax(1)  # type: ignore[union-attr]
        return Attempt(images.detach(), found.cpu(), value, "budget", self.iterations)

    def objective(self, target: AttackTarget, images: torch.Tensor, labels: torch.Tensor | None,
                  logits: torch.Tensor | None, alpha: torch.Tensor, start: dict[str, torch.Tensor], names: list[str],
                  scale: float) -> torch.Tensor:
        """``1 - cos`` between the candidates' full-batch gradient at the surrogate ``theta_0 + alpha (theta_T -
        theta_0)`` and the update's direction, plus ``tv`` times the reference code's total variation (the mean of
        the two directions' mean absolute neighbour differences); differentiable in the images, the label logits and
        ``alpha``."""
        target.evaluations += 1
        surrogate = {k: p - alpha * scale * target.gradient[k] if k in target.gradient else p for k, p in start.items()}
        for k in names:  # a surrogate given a constant alpha (not the attempt's leaf) is still differentiated
            surrogate[k] = surrogate[k] if surrogate[k].requires_grad else surrogate[k].detach().requires_grad_(True)
        if target.clip is not None:  # DP-SGD's view: each candidate's gradient clipped, then the mean (no noise)
            mean = clipped_mean_gradient(lambda x: functional_call(target.model, surrogate, (x,)), surrogate, images,
                                         labels, logits, target.clip)
            grads = tuple(mean[k] for k in names)
        else:
            loss = candidate_loss(functional_call(target.model, surrogate, (images,)), labels, logits)
            grads = torch.autograd.grad(loss, [surrogate[k] for k in names], create_graph=True)
        # the reference code's TV is half privbench's (the mean of the two directions' mean absolute differences)
        return cosine_distance(dict(zip(names, grads)), target.gradient) + self.tv * total_variation(images) / 2

    def budget(self) -> dict[str, Any]:
        """The attack's budget and settings, for ``threat_model.json``."""
        return {**super().budget(), "optimiser": "Adam", "lr": self.lr, "alpha": self.alpha,
                "alpha_lr": self.alpha_lr, "tv": self.tv, "decay": self.decay, "label_points": self.points,
                "labels": self.labels}
