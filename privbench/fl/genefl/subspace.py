"""One-shot clustering by data subspaces: truncated SVD, principal angles, hierarchical clusters."""
from __future__ import annotations

import numpy as np
import torch
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.linalg import subspace_angles
from scipy.spatial.distance import squareform

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


def proximity(bases: list[np.ndarray]) -> np.ndarray:
    """Symmetric matrix of summed principal angles (radians) between every pair of bases."""
    n = len(bases)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = float(np.sum(subspace_angles(bases[i], bases[j])))
    return out


def cluster(distances: np.ndarray, k: int) -> np.ndarray:
    """Average-linkage hierarchical clustering into at most ``k`` clusters, labels ``0..k'-1``.

    Labels are renumbered in order of first appearance so client 0 is in cluster 0.
    """
    n = len(distances)
    if not 1 <= k <= n:
        raise ConfigError(f"fl.num_clusters={k} must be in 1..{n} (the known clients)")
    if n == 1:
        return np.zeros(1, dtype=int)
    raw = fcluster(linkage(squareform(distances, checks=False), method="average"), t=k, criterion="maxclust")
    order = {c: i for i, c in enumerate(dict.fromkeys(raw.tolist()))}
    return np.array([order[c] for c in raw])


def nearest_cluster(basis: np.ndarray, bases: list[np.ndarray], labels: np.ndarray) -> int:
    """Cluster whose members' subspaces are closest on average (summed principal angles)."""
    dist = np.array([float(np.sum(subspace_angles(basis, b))) for b in bases])
    clusters = sorted(set(labels.tolist()))
    return int(min(clusters, key=lambda c: dist[labels == c].mean()))
