"""One-shot clustering by data subspaces: truncated SVD, principal angles, hierarchical clusters."""
from __future__ import annotations

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.linalg import subspace_angles
from scipy.spatial.distance import squareform

from privbench.errors import ConfigError
from privbench.subspaces import client_subspace, per_class_subspace

__all__ = ["SUBSPACES", "angle", "client_subspace", "cluster", "nearest_cluster", "per_class_subspace", "proximity"]


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


def proximity(bases: list[np.ndarray], *, variant: str = "svd") -> np.ndarray:
    """Symmetric matrix of ``angle`` between every pair of bases."""
    n = len(bases)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = angle(bases[i], bases[j], variant=variant)
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


def nearest_cluster(basis: np.ndarray, bases: list[np.ndarray], labels: np.ndarray, *, variant: str = "svd") -> int:
    """Cluster whose members' subspaces are closest on average (by ``angle``)."""
    dist = np.array([angle(basis, b, variant=variant) for b in bases])
    clusters = sorted(set(labels.tolist()))
    return int(min(clusters, key=lambda c: dist[labels == c].mean()))
