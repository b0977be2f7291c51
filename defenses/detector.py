"""A cautious client's check of the model it receives, before it trains on it.

Two tests, each cheap enough for any client: the download's tensors must be the agreed architecture's
(names and shapes), and no weight matrix may have rows that point the same way. The imprint block (Fowl et
al. 2022) fails both: it adds tensors, and its bins share one measurement direction. Honest downloads
(random initialisations, trained models) have no such rows; ``docs/protocol.md`` (Active server) gives the
measured false and true positive rates.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

#: Rows of one weight matrix whose cosine similarity is above this count as pointing the same way.
COSINE = 0.999


@dataclass(frozen=True)
class Verdict:
    """What the check found: ``flagged`` when any test failed, with one reason per failure."""

    flagged: bool
    reasons: list[str] = field(default_factory=list)


def aligned_rows(weight: torch.Tensor, *, cosine: float = COSINE) -> int:
    """How many rows of ``weight`` (one per output unit, the rest flattened) have another row within ``cosine``.

    Example:
        >>> aligned_rows(torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]]))
        2
    """
    rows = weight.detach().double().flatten(1)
    norms = rows.norm(dim=1, keepdim=True)
    unit = rows / norms.clamp(min=1e-300)
    similar = unit @ unit.T > cosine
    similar.fill_diagonal_(False)
    similar &= (norms > 0) & (norms > 0).T
    return int(similar.any(1).sum())


def inspect_download(received: dict[str, torch.Tensor], expected: dict[str, list[int]], *,
                     cosine: float = COSINE) -> Verdict:
    """Check a download against the agreed architecture (``expected``: name -> shape) and for aligned rows."""
    reasons = []
    extra = sorted(set(received) - set(expected))
    missing = sorted(set(expected) - set(received))
    reshaped = sorted(n for n in set(received) & set(expected) if list(received[n].shape) != list(expected[n]))
    if extra or missing or reshaped:
        reasons.append("architecture: " + "; ".join(part for part in (
            f"unexpected {', '.join(extra[:3])}{' ...' if len(extra) > 3 else ''}" if extra else "",
            f"missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}" if missing else "",
            f"reshaped {', '.join(reshaped[:3])}" if reshaped else "") if part))
    for name, tensor in received.items():
        if tensor.is_floating_point() and tensor.dim() >= 2 and len(tensor) >= 2:
            count = aligned_rows(tensor, cosine=cosine)
            if count:
                reasons.append(f"{name}: {count} of {len(tensor)} rows point the same way (cosine > {cosine})")
    return Verdict(bool(reasons), reasons)
