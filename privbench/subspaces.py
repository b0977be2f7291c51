"""A client's data subspace as GENE-FL and PACFL send it (the top left singular vectors of its images), and the
principal-angle distance that compares two of them."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from scipy.linalg import subspace_angles

from privbench.errors import ConfigError


def client_subspace(images: torch.Tensor, d: int) -> torch.Tensor:
    """Top-``d`` left singular vectors ``U`` (``[D, d]``) of the data matrix ``[D, n]``.

    Columns of the data matrix are the client's flattened images (in model input space).

    Example:
        >>> client_subspace(torch.randn(20, 1, 4, 4), 3).shape
        torch.Size([16, 3])
    """
    matrix = images.reshape(len(images), -1).T.double()
    if not 1 <= d <= min(matrix.shape):
        raise ConfigError(f"fl.subspace_dim={d} must be in 1..{min(matrix.shape)} (image size, client samples)")
    u, _, _ = torch.linalg.svd(matrix, full_matrices=False)
    return u[:, :d].float().contiguous()


def per_class_subspace(images: torch.Tensor, labels: torch.Tensor, d: int,
                       basis: Callable[[torch.Tensor, int], torch.Tensor]) -> torch.Tensor:
    """PACFL's basis: ``basis(images of class c, d)`` for each class present, concatenated in class order.

    Example:
        >>> x, y = torch.randn(12, 1, 4, 4), torch.tensor([0] * 6 + [3] * 6)
        >>> per_class_subspace(x, y, 2, client_subspace).shape
        torch.Size([16, 4])
    """
    classes = sorted(int(c) for c in torch.unique(labels))
    return torch.cat([basis(images[labels == c], min(d, int((labels == c).sum()))) for c in classes], dim=1)


#: How a client's subspace is formed and compared: ``svd`` (one SVD of all its images, summed
#: principal angles; GENE-FL as we read it) or ``pacfl`` (one SVD per class, concatenated, and
#: the smallest principal angle; PACFL, Vahidian et al. 2023, which GENE-FL cites).
SUBSPACES = ("svd", "pacfl")


def angle(a: np.ndarray, b: np.ndarray, *, variant: str = "svd") -> float:
    """Distance of two bases: summed principal angles (``svd``) or the smallest one (``pacfl``), radians.

    Example:
        >>> e = np.eye(3)
        >>> round(angle(e[:, :2], e[:, 1:], variant="svd"), 4), angle(e[:, :2], e[:, 1:], variant="pacfl")
        (1.5708, 0.0)
    """
    angles = subspace_angles(a, b)
    if variant == "pacfl":
        return float(np.min(angles))
    if variant == "svd":
        return float(np.sum(angles))
    raise ConfigError(f"fl.subspace={variant!r} is not one of {', '.join(SUBSPACES)}")
