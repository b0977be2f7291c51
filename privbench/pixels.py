"""Pixel normalisation between [0, 1] images and a model's input space (data and attacks share it)."""
from __future__ import annotations

import torch


def _stats(values: tuple[float, ...], like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(values, dtype=like.dtype, device=like.device).view(-1, 1, 1)


def normalise(x01: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """Map ``[0, 1]`` images to the model's input space.

    Example:
        >>> normalise(torch.ones(1, 1, 1, 1), (0.5,), (0.25,)).item()
        2.0
    """
    return (x01 - _stats(mean, x01)) / _stats(std, x01)


def denormalise(x: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """Map model-space images back to ``[0, 1]`` (clamped)."""
    return (x * _stats(std, x) + _stats(mean, x)).clamp(0.0, 1.0)


def bounds(mean: tuple[float, ...], std: tuple[float, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel ``(low, high)`` of valid pixels in model input space, ``[C, 1, 1]`` each."""
    m, s = torch.tensor(mean).view(-1, 1, 1), torch.tensor(std).view(-1, 1, 1)
    return (0 - m) / s, (1 - m) / s
