"""iDLG (Zhao et al., 2020): labels from the head's gradient, then L-BFGS on the images."""
from __future__ import annotations

import torch

from privbench.attacks.base import Attempt
from privbench.attacks.dlg import DLG
from privbench.attacks.labels import recover_labels
from privbench.attacks.matching import candidate_gradient, lbfgs_match
from privbench.attacks.target import AttackTarget


class IDLG(DLG):
    """Improved DLG.

    When the payload carries the classifier head's weight, labels are read off its
    gradient (``recover_labels``) and only the images are optimised. Without the head the
    labels are unknown and the attack falls back to DLG's joint optimisation, which the
    result records as ``label_source = "unknown: optimised jointly"``.
    """

    name = "idlg"

    def label_source(self, target: AttackTarget) -> str:
        return target.head_label_source

    def attempt(self, target: AttackTarget, *, generator: torch.Generator) -> Attempt:
        head = target.head_gradient
        if head is None:
            return super().attempt(target, generator=generator)
        labels = recover_labels(head, target.num_images)
        images = target.randn(target.num_images, *target.image_shape, generator=generator).requires_grad_(True)
        with self.progress(desc=self.name) as bar:
            objective, status, iters = lbfgs_match(
                [images], lambda: candidate_gradient(target, images, labels=labels), target,
                iterations=self.iterations, converged=self.converged, stall_at=self.stall_at,
                stall_tol=self.stall_tol, patience=self.patience, on_step=lambda v: bar.update(1, objective=v),
            )
        return Attempt(images.detach(), labels, objective, status, iters)
