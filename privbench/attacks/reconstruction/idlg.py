"""iDLG (Zhao et al., 2020): labels from the head's gradient, then L-BFGS on the images."""
from __future__ import annotations

from typing import Any, ClassVar

import torch

from privbench.attacks.labels.counts import check_label_rule, counted, with_counted_labels
from privbench.attacks.labels.recovery import known_labels
from privbench.attacks.labels.views import LabelView
from privbench.attacks.reconstruction.base import Attempt
from privbench.attacks.reconstruction.dlg import DLG
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.attacks.reconstruction.matching import candidate_gradient, lbfgs_match
from privbench.attacks.target import AttackTarget
from privbench.attacks.views import ViewKind
from privbench.schema import Count, Fraction, Iterations, NonNegative, PositiveInt, PublicImages, Restarts, Switch


class IDLG(DLG):
    """Improved DLG.

    When the payload carries the classifier head's weight, labels are known before the images are optimised: for
    one image iDLG's sign rule (``recover_labels``), for a batch the per-class counts recovered from the head's
    weight and bias gradients (``labels=auto``; ``attacks/labels``), which the sign rule cannot give when a
    class repeats. Without the head the labels are unknown and the attack falls back to DLG's joint
    optimisation, which the result records as ``label_source = "unknown: optimised jointly"``.

    Args:
        labels: ``auto``, ``counts``, ``sign`` or ``oracle`` (a control; ``labels.counts.LABEL_RULES``).
        public: labelled test-split images (no client holds them) the counts are estimated with.
    """

    name = "idlg"
    view: ClassVar[ViewKind] = "labels"

    def __init__(self, *, iterations: Iterations = 300, restarts: Restarts = 4, converged: NonNegative = 1e-6,
                 stall_at: Fraction = 0.25, stall_tol: NonNegative = 0.05, unroll: Switch = False,
                 max_images: PositiveInt = 64, patience: Count = 0, labels: str = "auto",
                 public: PublicImages = 2000) -> None:
        super().__init__(iterations=iterations, restarts=restarts, converged=converged, stall_at=stall_at,
                         stall_tol=stall_tol, unroll=unroll, max_images=max_images, patience=patience)
        check_label_rule(labels, public)
        self.labels, self.public = labels, public

    def attack(self, view: AttackTarget | LabelView, *, seed: int) -> Reconstruction:
        target = with_counted_labels(view, self.labels, seed=seed)
        found = super().attack(target, seed=seed)
        found.info["label_counts"] = counted(target)
        return found

    def budget(self) -> dict[str, Any]:
        """DLG's budget and where the batch's labels come from."""
        return {**super().budget(), "labels": self.labels}

    def label_source(self, target: AttackTarget) -> str:
        return target.head_label_source

    def attempt(self, target: AttackTarget, *, generator: torch.Generator) -> Attempt:
        labels = known_labels(target)
        if labels is None:
            return super().attempt(target, generator=generator)
        images = target.randn(target.num_images, *target.image_shape, generator=generator).requires_grad_(True)
        with self.progress(desc=self.name) as bar:
            objective, status, iters = lbfgs_match(
                [images], lambda: candidate_gradient(target, images, labels=labels), target,
                iterations=self.iterations, converged=self.converged, stall_at=self.stall_at,
                stall_tol=self.stall_tol, patience=self.patience, on_step=lambda v: bar.update(1, objective=v),
            )
        return Attempt(images.detach(), labels, objective, status, iters)
