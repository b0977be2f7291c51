"""Inverting Gradients (Geiping et al., 2020): cosine matching + total variation, signed Adam, boxed pixels."""
from __future__ import annotations

import math

import torch

from privbench.attacks.base import Attempt, GradientInversion
from privbench.attacks.labels import recover_labels
from privbench.attacks.matching import candidate_gradient
from privbench.attacks.objectives import cosine_distance, total_variation
from privbench.attacks.target import AttackTarget


class InvertingGradients(GradientInversion):
    """Minimise ``1 - cos(g(x), g_obs) + tv * TV(x)`` over images ``x``.

    Adam on the sign of the image gradient, learning rate decayed x0.1 at 3/8, 5/8 and 7/8
    of the iterations, pixels clamped to the valid range after every step. Labels are read
    off the head's gradient when the payload carries it; otherwise label logits are
    optimised jointly (plain Adam). Restarts are scored by the final objective.

    Args:
        lr: Adam learning rate on the images.
        tv: weight of total variation.
        iterations: Adam steps per attempt.
        restarts: attempts; the lowest final objective wins.
    """

    name = "ig"

    def __init__(self, *, iterations: int = 1000, restarts: int = 2, lr: float = 0.1, tv: float = 1e-3,
                 unroll: bool = False, max_images: int = 64) -> None:
        super().__init__(iterations=iterations, restarts=restarts, converged=0.0, stall_at=1.0, stall_tol=math.inf,
                         unroll=unroll, max_images=max_images)
        if lr <= 0 or tv < 0:
            raise ValueError("attack.lr must be > 0 and attack.tv >= 0")
        self.lr, self.tv = lr, tv

    def label_source(self, target: AttackTarget) -> str:
        return target.head_label_source

    def attempt(self, target: AttackTarget, *, generator: torch.Generator) -> Attempt:
        n = target.num_images
        images = torch.randn((n, *target.image_shape), generator=generator)
        target.clamp_(images)
        images.requires_grad_(True)
        head = target.head_gradient
        labels = recover_labels(head, n) if head is not None else None
        logits = None if labels is not None else torch.randn((n, target.num_classes), generator=generator).requires_grad_(True)
        optimizer = torch.optim.Adam([images] + ([logits] if logits is not None else []), lr=self.lr)
        milestones = [int(self.iterations * f) for f in (3 / 8, 5 / 8, 7 / 8)]
        scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=milestones, gamma=0.1)
        value, status = math.inf, "budget"
        with self.progress(desc=self.name) as bar:
            for it in range(1, self.iterations + 1):
                optimizer.zero_grad()
                grads = candidate_gradient(target, images, labels=labels, label_logits=logits)
                loss = cosine_distance(grads, target.gradient) + self.tv * total_variation(images)
                leaves = [images] + ([logits] if logits is not None else [])
                for leaf, g in zip(leaves, torch.autograd.grad(loss, leaves)):
                    leaf.grad = g
                assert images.grad is not None
                images.grad.sign_()
                optimizer.step()
                scheduler.step()
                target.clamp_(images)
                value = float(loss.detach())
                bar.update(1, objective=value)
                if not math.isfinite(value) or not torch.isfinite(images).all():
                    return Attempt(images.detach(), self._labels(labels, logits), math.nan, "nan", it)
        return Attempt(images.detach(), self._labels(labels, logits), value, status, self.iterations)

    @staticmethod
    def _labels(labels: torch.Tensor | None, logits: torch.Tensor | None) -> torch.Tensor:
        if labels is not None:
            return labels
        assert logits is not None
        return logits.detach().argmax(1)
