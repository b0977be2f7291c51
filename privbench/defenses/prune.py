"""Top-p pruning of every uplink payload tensor by magnitude (on a model upload: of its change)."""
from __future__ import annotations

import math
from typing import Any

import torch

from privbench.defenses.transform import transform
from privbench.errors import ConfigError
from privbench.payloads import Payload
from privbench.payloads.transform import MessageTransform
from privbench.schema import Fraction


def keep_top(t: torch.Tensor, fraction: float) -> torch.Tensor:
    """Zero all but the ``ceil(fraction * numel)`` largest-magnitude entries (ties by position).

    Example:
        >>> keep_top(torch.tensor([0.1, -3.0, 2.0, 0.5]), 0.5)
        tensor([ 0., -3.,  2.,  0.])
    """
    if fraction >= 1.0:
        return t
    k = math.ceil(fraction * t.numel())
    flat = t.flatten()
    keep = torch.zeros_like(flat, dtype=torch.bool)
    keep[torch.topk(flat.abs(), k, sorted=False).indices] = True
    return torch.where(keep, flat, torch.zeros_like(flat)).view_as(t)


class Prune(MessageTransform):
    """Keep the top ``p`` fraction of each tensor by magnitude; ``p=1`` sends the payload unchanged."""

    name = "prune"

    def __init__(self, *, p: Fraction = 0.1, seed: int = 0) -> None:
        if not 0 < p <= 1:
            raise ConfigError(f"defense.p must be in (0, 1], got {p}")
        self.p = p

    def protect(self, payload: Payload, base: dict[str, torch.Tensor] | None = None) -> Payload:
        if self.p >= 1.0:
            return payload
        what = "change from the received model" if payload.spec.carries == "model" and base is not None else "values"
        return transform(payload, base, lambda _, t: keep_top(t, self.p),
                         protection=f"kept the top {self.p:g} of each tensor's {what} by magnitude")

    def describe(self) -> dict[str, Any]:
        return {"defense": self.name, "p": self.p}
