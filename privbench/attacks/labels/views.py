"""What a label attack holds: a gradient view and labelled public data."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from privbench.attacks.target import AttackTarget
from privbench.pixels import normalise


@dataclass
class LabelView:
    """A message's (pseudo-)gradient at the model it was computed at, and labelled public data of the task.

    Attributes:
        target: the gradient view (the observed head gradient, the base model, the image count).
        public: public images (the test split, which no client holds) in model input space, ``[M, C, H, W]``.
        public_labels: their labels ``[M]``.
        oracle_counts: the batch's true per-class counts, set by the evaluator only for ``attack.labels=oracle``
            (a control row); None otherwise.
    """

    target: AttackTarget
    public: torch.Tensor
    public_labels: torch.Tensor
    oracle_counts: torch.Tensor | None = None

    @classmethod
    def from_test_split(cls, target: AttackTarget, images: torch.Tensor, labels: torch.Tensor, *, count: int,
                        seed: int, mean: tuple[float, ...], std: tuple[float, ...]) -> "LabelView":
        """``target`` with ``count`` of the test split's uint8 ``images`` (no client holds them) drawn by ``seed``,
        normalised by the run's ``mean`` and ``std``, and their ``labels``."""
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed * 7919 + 29))
        rows = order[:count].to(images.device)
        public = normalise(images[rows].cpu().float() / 255.0, mean, std)
        return cls(target, public.to(target.device), labels[rows].cpu().to(target.device))

    @property
    def knowledge(self) -> dict[str, Any]:
        """The gradient view's declaration, and the public data it was given."""
        return {**self.target.knowledge, "public_data": f"{len(self.public)} labelled test-split images"}
