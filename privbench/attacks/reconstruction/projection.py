"""Projection attack on a ``subspace`` payload: how much of each private image the SVD basis reveals."""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from privbench.attacks.base import Attack
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.attacks.views import BasisView, ViewKind
from privbench.figures import PROJECTION_PSNR_MEAN
from privbench.metrics.image import psnr, ssim
from privbench.payloads.kinds import Carries
from privbench.pixels import denormalise, normalise


class SubspaceProjection(Attack[BasisView, Reconstruction]):
    """Score the leakage of a client's SVD basis ``U`` (``[D, d]``, in model input space).

    Two views: (1) the attacker's own reconstructions, the basis vectors shown as images
    (each min-max scaled to [0, 1]; the sign of a singular vector is arbitrary, so the sign
    that best correlates with the image mean is taken); (2) an upper bound, each private
    image's projection ``U U^T x`` onto the basis, which is exact when ``d`` reaches the
    client's number of images.
    """

    name = "projection"
    reads: ClassVar[frozenset[Carries]] = frozenset({"basis"})
    view: ClassVar[ViewKind] = "basis"

    def attack(self, view: BasisView, *, seed: int) -> Reconstruction:
        """The basis vectors as the attacker's reconstructions (a basis carries no labels)."""
        images = self.basis_images(view.basis, view.image_shape)
        return Reconstruction(images=images, labels=torch.full((len(images),), -1), label_source="none", pixels=True)

    def evaluate(self, view: BasisView, truth: torch.Tensor) -> dict[str, Any]:
        """The evaluator's upper bound: each private image's projection onto the basis."""
        return self.projections_scored(view.basis, truth, mean=view.mean, std=view.std)

    @staticmethod
    def basis_images(basis: torch.Tensor, shape: tuple[int, int, int]) -> torch.Tensor:
        """The ``d`` basis vectors as ``[d, C, H, W]`` images in [0, 1]."""
        images = basis.T.reshape(-1, *shape).double()
        flip = images.flatten(1).mean(1) < 0
        images[flip] = -images[flip]
        low = images.flatten(1).min(1).values.view(-1, 1, 1, 1)
        high = images.flatten(1).max(1).values.view(-1, 1, 1, 1)
        return ((images - low) / (high - low).clamp_min(1e-12)).float()

    @staticmethod
    def projections(basis: torch.Tensor, truth01: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
        """``U U^T x`` of each private image (computed in model space), returned in [0, 1]."""
        x = normalise(truth01.double(), mean, std).flatten(1).T
        u = basis.double()
        return denormalise((u @ (u.T @ x)).T.reshape(truth01.shape), mean, std).float()

    def projections_scored(self, basis: torch.Tensor, truth01: torch.Tensor, *, mean: tuple[float, ...],
                           std: tuple[float, ...]) -> dict[str, Any]:
        """Projection metrics of every private image: mean and best PSNR / SSIM."""
        proj = self.projections(basis, truth01, mean, std)
        p = np.array([min(psnr(a, b), 100.0) for a, b in zip(proj, truth01)])
        s = np.array([ssim(a, b) for a, b in zip(proj, truth01)])
        return {PROJECTION_PSNR_MEAN.key: float(p.mean()), "projection_psnr_best": float(p.max()),
                "projection_ssim_mean": float(s.mean()), "projection_ssim_best": float(s.max()),
                "basis_dim": int(basis.shape[1]), "client_images": len(truth01)}
