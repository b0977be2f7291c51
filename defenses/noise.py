"""Gaussian noise on every uplink payload (on a model upload: on its change)."""
from __future__ import annotations

from typing import Any

import torch

from defenses.transform import payload_generator, transform
from privbench.errors import ConfigError
from privbench.payloads import Payload
from privbench.payloads.transform import MessageTransform


class GaussianNoise(MessageTransform):
    """Add N(0, sigma^2) to each value a client sends.

    Example:
        >>> GaussianNoise(sigma=0.01).describe()
        {'defense': 'noise', 'sigma': 0.01}
    """

    name = "noise"

    def __init__(self, *, sigma: float = 0.01, seed: int = 0) -> None:
        if sigma < 0:
            raise ConfigError(f"defense.sigma must be >= 0, got {sigma}")
        self.sigma, self.seed = sigma, seed

    def protect(self, payload: Payload, base: dict[str, torch.Tensor] | None = None) -> Payload:
        gen = payload_generator(self.seed, payload)
        return transform(payload, base, lambda _, t: t + self.sigma * torch.randn(t.shape, generator=gen, dtype=t.dtype))

    def describe(self) -> dict[str, Any]:
        return {"defense": self.name, "sigma": self.sigma}
