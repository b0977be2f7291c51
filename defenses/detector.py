"""A cautious client's check of the model it receives, before it trains on it.

Three tests, each cheap enough for any client: the download's tensors must be the agreed architecture's
(names and shapes); no weight matrix may have rows that point the same way; and, on the client's own data, the
model's first ReLU layer must not be nearly silent. The imprint block (Fowl et al. 2022) fails the first two: it
adds tensors, and its bins share one measurement direction. Trap weights (Boenisch et al. 2023) keep the
architecture and draw each row at random, so they pass both; they fail the third, as their rows are built to fire
for few inputs. Honest downloads (random initialisations, trained models) fail none; ``docs/protocol.md``
(Active server) gives the measured false and true positive rates.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

#: Rows of one weight matrix whose cosine similarity is above this count as pointing the same way.
COSINE = 0.999
#: A first ReLU layer whose units fire, on average, on fewer than this share of the client's inputs is silent.
FIRING = 0.2


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


def first_firing(model: nn.Module, inputs: torch.Tensor) -> tuple[str, float] | None:
    """The first ``nn.ReLU`` module of ``model`` that ``inputs`` reach, and the share of its outputs that are
    positive on them (its units' mean firing rate); None when the model has no ReLU module.

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        >>> with torch.no_grad():
        ...     _ = net[0].weight.copy_(torch.eye(2)), net[0].bias.zero_()
        >>> first_firing(net, torch.tensor([[1.0, -1.0], [2.0, 3.0]]))
        ('1', 0.75)
    """
    seen: list[tuple[str, float]] = []

    def hook(name: str) -> Callable[[nn.Module, tuple[torch.Tensor, ...], torch.Tensor], None]:
        def record(_module: nn.Module, _inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            if not seen:
                seen.append((name, float((output > 0).double().mean())))
        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if isinstance(m, nn.ReLU)]
    training = model.training
    model.eval()  # the check must not move the model's running statistics
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        model.train(training)
        for handle in handles:
            handle.remove()
    return seen[0] if seen else None


def inspect_download(received: dict[str, torch.Tensor], expected: dict[str, list[int]], *,
                     cosine: float = COSINE, model: nn.Module | None = None, local: torch.Tensor | None = None,
                     firing: float = FIRING) -> Verdict:
    """Check a download against the agreed architecture (``expected``: name -> shape) and for aligned rows; given
    the received ``model`` and the client's ``local`` inputs (model input space), also for a silent first ReLU."""
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
    if model is not None and local is not None and len(local):
        first = first_firing(model, local)
        if first is not None and first[1] < firing:
            reasons.append(f"{first[0]}: its units fire on {first[1]:.1%} of the client's {len(local)} inputs on "
                           f"average (under {firing:.0%})")
    return Verdict(bool(reasons), reasons)
