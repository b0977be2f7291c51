"""A reconstruction's answer: images and labels."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from privbench.attacks.findings import Finding


@dataclass
class Reconstruction(Finding):
    """The best attempt's images ``[N, C, H, W]`` and labels, or None when every attempt diverged.

    ``objective`` is its final relative objective; ``label_source`` how the labels were obtained
    (``none``: not at all); ``pixels`` says the images are already in [0, 1] (else in model input space).
    """

    images: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    objective: float = float("nan")
    label_source: str = "optimised"
    pixels: bool = False

    @property
    def failed(self) -> bool:
        """True when every attempt diverged (no reconstruction to score)."""
        return self.images is None
