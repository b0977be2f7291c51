"""One-shot clustering by data subspaces: truncated SVD, principal angles, hierarchical clusters."""
from __future__ import annotations

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

from privbench.errors import ConfigError
from privbench.subspaces import SUBSPACES, angle, client_subspace, per_class_subspace

__all__ = ["SUBSPACES", "angle", "client_subspace", "cluster", "nearest_cluster", "per_class_subspace", "proximity"]


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
