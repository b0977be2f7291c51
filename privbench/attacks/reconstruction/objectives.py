"""Gradient-matching objectives over named gradients."""
from __future__ import annotations

from typing import cast

import torch


def squared_l2(candidate: dict[str, torch.Tensor], observed: dict[str, torch.Tensor]) -> torch.Tensor:
    """``sum_name ||g_candidate - g_observed||^2`` (DLG, iDLG).

    The tensors are concatenated first: one subtraction, square and sum instead of three per
    name (and as few backward nodes), which at batch 1 is a measurable share of an evaluation.
    Its gradient is the same, entry by entry, as summing name by name.

    Example:
        >>> squared_l2({"w": torch.ones(2), "b": torch.ones(1)}, {"w": torch.zeros(2), "b": torch.zeros(1)})
        tensor(3.)
    """
    names = list(observed)
    diff = torch.cat([candidate[n].flatten() for n in names]) - torch.cat([observed[n].flatten() for n in names])
    return (diff * diff).sum()


def squared_norm(observed: dict[str, torch.Tensor]) -> float:
    """``sum_name ||g||^2``: the scale that makes ``squared_l2`` relative."""
    return float(sum((g.double() ** 2).sum() for g in observed.values()))


def cosine_distance(candidate: dict[str, torch.Tensor], observed: dict[str, torch.Tensor]) -> torch.Tensor:
    """``1 - cos`` between the concatenated gradients (Inverting Gradients).

    Example:
        >>> cosine_distance({"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([2.0, 0.0])})
        tensor(0.)
    """
    dot = cast(torch.Tensor, sum((candidate[n] * observed[n]).sum() for n in observed))
    cand = cast(torch.Tensor, sum((candidate[n] ** 2).sum() for n in observed))
    obs = cast(torch.Tensor, sum((observed[n] ** 2).sum() for n in observed))
    return 1 - dot / (cand.sqrt() * obs.sqrt() + 1e-12)


def total_variation(images: torch.Tensor, *, each: bool = False) -> torch.Tensor:
    """Mean absolute difference of neighbouring pixels (anisotropic TV), ``[N, C, H, W]``.

    With ``each``, ``images`` is ``[P, N, C, H, W]`` and the result holds each problem's TV, ``[P]``.

    Example:
        >>> total_variation(torch.tensor([[[[0.0, 1.0], [0.0, 1.0]]]]))
        tensor(1.)
    """
    dx = (images[..., :, 1:] - images[..., :, :-1]).abs()
    dy = (images[..., 1:, :] - images[..., :-1, :]).abs()
    if each:
        return dx.flatten(1).mean(1) + dy.flatten(1).mean(1)
    return dx.mean() + dy.mean()
