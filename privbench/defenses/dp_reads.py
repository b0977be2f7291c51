"""Gaussian-mechanism versions of GENE-FL's two other reads: the Fisher diagonal and the data subspace."""
from __future__ import annotations

import torch
from torch import nn

from privbench.data.dataset import ImageDataset
from privbench.fl.fisher import squared_gradients


def dp_fisher_diagonal(model: nn.Module, data: ImageDataset, *, clip: float, sigma: float,
                       generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Fisher diagonal from per-sample gradients clipped to ``clip``, with Gaussian noise.

    ``sum_i g_i^2`` has L2 sensitivity ``clip^2`` (``||g^2||_2 <= ||g||_2^2``), so noise
    ``N(0, (sigma clip^2)^2)`` per coordinate is a Gaussian mechanism of multiplier ``sigma``;
    the noisy sum is clamped at 0 (post-processing) and divided by the client's size.
    """
    sums = squared_gradients(model, data, clip=clip)
    scale = sigma * clip**2
    return {k: (v + scale * torch.randn(v.shape, generator=generator, dtype=v.dtype).to(v.device)).clamp(min=0) / len(data)
            for k, v in sums.items()}


def dp_subspace(images: torch.Tensor, d: int, *, sigma: float, generator: torch.Generator) -> torch.Tensor:
    """Top-``d`` eigenvectors of a noisy covariance (DP-PCA, Dwork et al. 2014's "analyze Gauss").

    Each flattened image is scaled to L2 norm at most 1, so one image changes ``A^T A`` by at
    most 1 in Frobenius norm; a symmetric matrix with ``N(0, sigma^2)`` entries on and above the
    diagonal is added, and the eigenvectors of the ``d`` largest eigenvalues are returned
    (``[D, d]``, like ``client_subspace``).

    Example:
        >>> u = dp_subspace(torch.randn(30, 1, 4, 4), 3, sigma=1.0, generator=torch.Generator().manual_seed(0))
        >>> u.shape, bool(torch.allclose(u.T @ u, torch.eye(3), atol=1e-5))
        (torch.Size([16, 3]), True)
    """
    rows = images.reshape(len(images), -1).double()
    rows = rows / rows.norm(dim=1, keepdim=True).clamp(min=1.0)
    dim = rows.shape[1]
    upper = torch.randn(dim, dim, generator=generator, dtype=torch.float64).to(rows.device).triu() * sigma
    noisy = rows.T @ rows + upper + upper.triu(1).T
    _, vectors = torch.linalg.eigh(noisy)
    return vectors[:, -d:].flip(1).float().contiguous()
