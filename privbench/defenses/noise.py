"""Gaussian noise on every uplink payload, in one unit for every kind: the message's (pseudo-)gradient."""
from __future__ import annotations

from typing import Annotated, Any

import torch

from privbench.defenses.transform import payload_generator, transform
from privbench.errors import ConfigError
from privbench.payloads import Payload
from privbench.payloads.transform import MessageTransform
from privbench.schema import Number


class GaussianNoise(MessageTransform):
    """Add ``N(0, sigma^2)`` per coordinate of each uplink's (pseudo-)gradient.

    A gradient gets ``sigma`` noise as sent. A model upload with a training record gets
    noise of std ``lr * steps * sigma`` on its change, which is ``sigma`` on the pseudo-gradient
    ``-(theta - theta_base) / (lr * steps)``: equal settings give equal noise-to-signal on a
    gradient and on the one-step update it produces. Other tensors (a subspace basis) get
    ``sigma`` as sent. Each payload's ``protection`` says what was added to what.

    Example:
        >>> GaussianNoise(sigma=0.01).describe()
        {'defense': 'noise', 'sigma': 0.01, 'unit': 'per coordinate of the (pseudo-)gradient'}
    """

    name = "noise"

    def __init__(self, *, sigma: Annotated[float, Number(low=0, high=1e6)] = 0.01, seed: int = 0) -> None:
        if sigma < 0:
            raise ConfigError(f"defense.sigma must be >= 0, got {sigma}")
        self.sigma, self.seed = sigma, seed

    def scale(self, payload: Payload, base: dict[str, torch.Tensor] | None) -> tuple[float, str]:
        """Noise std on what the payload's tensors reveal, and a note of what it is added to."""
        training = payload.training
        if payload.spec.carries == "model" and base is not None and training is not None:
            factor = training.lr * training.steps
            return self.sigma * factor, (f"N(0, {self.sigma:g}^2) on the pseudo-gradient -delta/(lr*steps): std "
                                         f"{self.sigma * factor:.4g} on the change from the received model")
        return self.sigma, f"N(0, {self.sigma:g}^2) on each value sent"

    def protect(self, payload: Payload, base: dict[str, torch.Tensor] | None = None) -> Payload:
        gen = payload_generator(self.seed, payload)
        std, note = self.scale(payload, base)
        return transform(payload, base, lambda _, t: t + std * torch.randn(t.shape, generator=gen, dtype=t.dtype),
                         protection=note)

    def describe(self) -> dict[str, Any]:
        return {"defense": self.name, "sigma": self.sigma, "unit": "per coordinate of the (pseudo-)gradient"}
