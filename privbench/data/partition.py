"""Seeded client partitions (iid, shard, dirichlet) and the known/agnostic class split."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from privbench.errors import ConfigError

SCHEMES = ("iid", "shard", "dirichlet")


def split_classes(num_classes: int, agnostic: Sequence[int]) -> tuple[list[int], list[int]]:
    """Split ``range(num_classes)`` into known classes and the given agnostic classes.

    Example:
        >>> split_classes(10, [8, 9])
        ([0, 1, 2, 3, 4, 5, 6, 7], [8, 9])
    """
    agnostic = sorted(set(int(c) for c in agnostic))
    bad = [c for c in agnostic if not 0 <= c < num_classes]
    if bad:
        raise ConfigError(f"data.agnostic_classes: {bad} outside 0..{num_classes - 1}")
    known = [c for c in range(num_classes) if c not in agnostic]
    if not known:
        raise ConfigError("data.agnostic_classes: leaves no known class for the known clients")
    return known, agnostic


def partition(
    labels: np.ndarray,
    *,
    scheme: str,
    num_clients: int,
    classes_per_client: int = 2,
    alpha: float = 0.5,
    min_size: int = 1,
    seed: int = 0,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Split sample indices among ``num_clients`` clients.

    Args:
        labels: label of each sample (only these samples are partitioned).
        scheme: ``iid`` (uniform shuffle), ``shard`` (each client holds exactly
            ``classes_per_client`` classes; a class's samples are split evenly among
            the clients holding it) or ``dirichlet`` (per-class proportions drawn from
            Dir(``alpha``), redrawn until every client has ``min_size`` samples).
        num_clients: number of clients.
        classes_per_client: classes per client for ``shard``.
        alpha: Dirichlet concentration for ``dirichlet``.
        min_size: smallest number of samples any client may get.
        seed: seed of the numpy generator; equal seeds give equal partitions.

    Returns:
        One sorted index array per client; together they cover each sample at most once.

    Raises:
        ConfigError: the partition is impossible with these settings.
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    if num_clients < 1:
        raise ConfigError(f"data.num_clients must be >= 1, got {num_clients}")
    if num_clients * min_size > len(labels):
        raise ConfigError(
            f"data.min_size={min_size} x data.num_clients={num_clients} exceeds the {len(labels)} samples available"
        )
    if scheme == "iid":
        parts = np.array_split(rng.permutation(len(labels)), num_clients)
    elif scheme == "shard":
        parts = _shard(labels, classes, num_clients, classes_per_client, rng)
    elif scheme == "dirichlet":
        parts = _dirichlet(labels, classes, num_clients, alpha, min_size, rng, max_tries)
    else:
        raise ConfigError(f"data.partition={scheme!r} is not one of {', '.join(SCHEMES)}")
    parts = [np.sort(p).astype(np.int64) for p in parts]
    small = min(len(p) for p in parts)
    if small < min_size:
        raise ConfigError(f"data.partition={scheme}: a client gets {small} samples < data.min_size={min_size}")
    return parts


def _shard(labels: np.ndarray, classes: np.ndarray, num_clients: int, s: int,
           rng: np.random.Generator) -> list[np.ndarray]:
    if not 1 <= s <= len(classes):
        raise ConfigError(f"data.classes_per_client={s} must be in 1..{len(classes)} (the known classes)")
    if num_clients * s < len(classes):
        raise ConfigError(
            f"data.classes_per_client={s} x data.num_clients={num_clients} < {len(classes)} classes: some class has no client"
        )
    order = rng.permutation(classes)
    owned = [[order[(i * s + j) % len(classes)] for j in range(s)] for i in range(num_clients)]
    holders = {c: [i for i, cs in enumerate(owned) if c in cs] for c in classes}
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, owners in holders.items():
        idx = rng.permutation(np.flatnonzero(labels == c))
        for owner, chunk in zip(owners, np.array_split(idx, len(owners))):
            parts[owner].append(chunk)
    return [np.concatenate(p) for p in parts]


def _dirichlet(labels: np.ndarray, classes: np.ndarray, num_clients: int, alpha: float, min_size: int,
               rng: np.random.Generator, max_tries: int) -> list[np.ndarray]:
    if alpha <= 0:
        raise ConfigError(f"data.alpha must be > 0, got {alpha}")
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(num_clients, alpha))) * len(idx)).astype(int)[:-1]
            for i, chunk in enumerate(np.split(idx, cuts)):
                parts[i].append(chunk)
        merged = [np.concatenate(p) for p in parts]
        if min(len(p) for p in merged) >= min_size:
            return merged
    raise ConfigError(
        f"data.partition=dirichlet: no draw in {max_tries} gave every client >= data.min_size={min_size} samples; "
        "raise data.alpha or lower data.min_size"
    )
