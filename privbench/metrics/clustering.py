"""Agreement of a clustering with a reference grouping (the Rand index)."""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from itertools import combinations


def rand_index(labels: Sequence[Hashable], reference: Sequence[Hashable]) -> float:
    """Fraction of item pairs on which two groupings agree (both together, or both apart).

    Example:
        >>> rand_index([0, 0, 1, 1], ["a", "a", "b", "b"])
        1.0
        >>> rand_index([0, 0, 0, 0], ["a", "a", "b", "b"])
        0.3333333333333333
    """
    if len(labels) != len(reference):
        raise ValueError(f"{len(labels)} labels vs {len(reference)} reference labels")
    pairs = list(combinations(range(len(labels)), 2))
    if not pairs:
        return 1.0
    agree = sum((labels[i] == labels[j]) == (reference[i] == reference[j]) for i, j in pairs)
    return agree / len(pairs)
