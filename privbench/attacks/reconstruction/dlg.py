"""DLG (Zhu et al., 2019): joint optimisation of images and soft labels by L-BFGS."""
from __future__ import annotations

from typing import Any

import torch

from privbench.attacks.reconstruction.base import Attempt, GradientInversion
from privbench.attacks.reconstruction.matching import candidate_gradient, lbfgs_match
from privbench.attacks.target import AttackTarget


class DLG(GradientInversion):
    """Deep Leakage from Gradients.

    Images and label logits start from N(0, 1) and are optimised jointly with L-BFGS to
    match the observed gradient in squared L2. Labels are the argmax of the logits.

    Example:
        >>> result = DLG(iterations=300, restarts=4).attack(target, seed=0)  # doctest: +SKIP
    """

    name = "dlg"

    def budget(self) -> dict[str, Any]:
        """Restarts x L-BFGS steps (each up to 20 evaluations), and the early stops."""
        return {**super().budget(), "optimiser": "L-BFGS, up to 20 evaluations a step", "unroll": self.unroll}

    def attempt(self, target: AttackTarget, *, generator: torch.Generator) -> Attempt:
        n, shape = target.num_images, target.image_shape
        images = target.randn(n, *shape, generator=generator).requires_grad_(True)
        logits = target.randn(n, target.num_classes, generator=generator).requires_grad_(True)
        with self.progress(desc=self.name) as bar:
            objective, status, iters = lbfgs_match(
                [images, logits], lambda: candidate_gradient(target, images, label_logits=logits), target,
                iterations=self.iterations, converged=self.converged, stall_at=self.stall_at,
                stall_tol=self.stall_tol, patience=self.patience, on_step=lambda v: bar.update(1, objective=v),
            )
        return Attempt(images.detach(), logits.detach().argmax(1), objective, status, iters)
