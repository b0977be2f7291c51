"""Gradient-matching objectives over named gradients."""
from __future__ import annotations

import torch


def squared_l2(candidate: dict[str, torch.Tensor], observed: dict[str, torch.Tensor]) -> torch.Tensor:
    """``sum_name ||g_candidate - g_observed||^2`` (DLG, iDLG).

    Example:
        >>> squared_l2({"w": torch.ones(2)}, {"w": torch.zeros(2)})
        tensor(2.)
    """
    return sum(((candidate[n] - observed[n]) ** 2).sum() for n in observed)


def squared_norm(observed: dict[str, torch.Tensor]) -> float:
    """``sum_name ||g||^2``: the scale that makes ``squared_l2`` relative."""
    return float(sum((g.double() ** 2).sum() for g in observed.values()))
