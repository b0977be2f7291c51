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
#: A unit that fires on fewer than this share of the client's inputs is rare (``rare_units``).
RARE = 0.05


@dataclass(frozen=True)
class Verdict:
    """What the check found: ``flagged`` when any test failed, with one reason per failure."""

    flagged: bool
    reasons: list[str] = field(default_factory=list)


def row_cosines(weight: torch.Tensor) -> torch.Tensor:
    """The cosine between every two rows of ``weight`` (one per output unit, the rest flattened); -1 on the
    diagonal and for a zero row, which points nowhere.

    Example:
        >>> row_cosines(torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 0.0]])).tolist()
        [[-1.0, 1.0, -1.0], [1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]
    """
    rows = weight.detach().double().flatten(1)
    norms = rows.norm(dim=1, keepdim=True)
    cosines = (rows / norms.clamp(min=1e-300)) @ (rows / norms.clamp(min=1e-300)).T
    cosines.fill_diagonal_(-1.0)
    return cosines.masked_fill(~((norms > 0) & (norms > 0).T), -1.0)


def aligned_rows(weight: torch.Tensor, *, cosine: float = COSINE) -> int:
    """How many rows of ``weight`` (one per output unit, the rest flattened) have another row within ``cosine``.

    Example:
        >>> aligned_rows(torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]]))
        2
    """
    return int((row_cosines(weight) > cosine).any(1).sum())


def relu_firing(model: nn.Module, inputs: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """Each ``nn.ReLU`` module of ``model`` that ``inputs`` reach, in the order they run, with each of its units'
    (output elements') share of ``inputs`` on which it is positive; the model in eval mode, no gradient, its mode
    restored (the check must not move its running statistics).

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        >>> with torch.no_grad():
        ...     _ = net[0].weight.copy_(torch.eye(2)), net[0].bias.zero_()
        >>> [(name, rates.tolist()) for name, rates in relu_firing(net, torch.tensor([[1.0, -1.0], [2.0, 3.0]]))]
        [('1', [1.0, 0.5])]
    """
    seen: list[tuple[str, torch.Tensor]] = []

    def hook(name: str) -> Callable[[nn.Module, tuple[torch.Tensor, ...], torch.Tensor], None]:
        def record(_module: nn.Module, _inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            flat = output.detach().flatten(1) if output.dim() > 1 else output.detach().reshape(1, -1)  # one input
            seen.append((name, (flat > 0).double().mean(0)))
        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if isinstance(m, nn.ReLU)]
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        model.train(training)
        for handle in handles:
            handle.remove()
    return seen


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
    seen = relu_firing(model, inputs)
    return (seen[0][0], float(seen[0][1].mean())) if seen else None


def rare_units(model: nn.Module, inputs: torch.Tensor, *, rare: float = RARE) -> float:
    """The largest share, over ``model``'s ``nn.ReLU`` modules, of one module's units (output elements) that are
    positive on fewer than ``rare`` of ``inputs``: a trap row fires for few inputs by design, in any layer.

    Example:
        >>> net = nn.Sequential(nn.Linear(1, 2), nn.ReLU(), nn.Linear(2, 4), nn.ReLU())
        >>> with torch.no_grad():
        ...     _ = net[0].weight.fill_(1.0), net[0].bias.zero_(), net[2].weight.fill_(1.0)
        ...     _ = net[2].bias.copy_(torch.tensor([0.0, 0.0, -5.0, -5.0]))
        >>> x = torch.arange(1.0, 21.0).unsqueeze(1)
        >>> rare_units(net, x)  # units 3 and 4 fire on 18 of the 20 inputs: not rare
        0.0
        >>> _ = net[2].bias.data.fill_(-39.5)  # all four fire on one input of 20 (5 %): rare below 10 %, not 5 %
        >>> rare_units(net, x), rare_units(net, x, rare=0.1)
        (0.0, 1.0)
    """
    return rare_share(relu_firing(model, inputs), rare=rare)


def rare_share(fired: list[tuple[str, torch.Tensor]], *, rare: float = RARE) -> float:
    """``rare_units`` from one ``relu_firing`` pass."""
    return max([0.0, *(float((rates < rare).double().mean()) for _, rates in fired)])


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


def drift(received: dict[str, torch.Tensor], previous: dict[str, torch.Tensor] | None) -> float:
    """The largest relative change of one weight matrix (two or more dimensions: what a trap rewrites; a bias near 0
    moves by many times itself in honest training) from the model the client received the round before,
    ``||new - old|| / ||old||`` (0 without one, or for a matrix it did not hold).

    Example:
        >>> round(drift({"w": torch.tensor([[2.0, 0.0]]), "b": torch.tensor([9.0])},
        ...             {"w": torch.tensor([[1.0, 0.0]]), "b": torch.tensor([0.1])}), 9)
        1.0
    """
    if previous is None:
        return 0.0
    changes = [float((t.detach().double() - previous[n].double()).norm() / (previous[n].double().norm() + 1e-12))
               for n, t in received.items() if t.is_floating_point() and t.dim() >= 2 and n in previous
               and previous[n].shape == t.shape]
    return max(changes, default=0.0)


def download_scores(received: dict[str, torch.Tensor], expected: dict[str, list[int]], *, model: nn.Module,
                    local: torch.Tensor, previous: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
    """Continuous scores of a download, each larger where it looks more crafted (for a ROC of the checks):

    - ``architecture``: 1 when its names or shapes differ from ``expected``, else 0 (the first check);
    - ``aligned``: the largest cosine between two rows of one weight matrix (the second check, at 0.999);
    - ``silent``: 1 minus its first ReLU layer's mean firing rate on ``local`` (the third check, at 0.8);
    - ``off_centre``: how far that firing rate is from 1/2, either way (a layer that always fires is linear);
    - ``dead_rows``: the largest share of all-zero rows in one weight matrix (a unit that can never fire);
    - ``rare_units``: the largest share of one ReLU module's units that fire on fewer than 5 % of ``local``
      (``rare_units``: a trap in any layer, not only the first);
    - ``bias_scale``: the largest bias, in units of its layer's default initialisation bound ``1/sqrt(fan_in)``;
    - ``drift``: the largest relative change of a weight matrix from ``previous``, the model the client received the
      round before (``drift``; 0 in a client's first round).

    Limits: ``silent`` and ``off_centre`` read the first ``nn.ReLU`` module (a model without one, or with a
    functional ReLU, scores a neutral 1/2 and 0); ``bias_scale`` reads biases beside a weight of two or more
    dimensions (normalisation layers' biases are not scored).

    Example:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 2), nn.ReLU())
        >>> with torch.no_grad():
        ...     _ = net[1].weight.copy_(torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, 0]])), net[1].bias.zero_()
        >>> scores = download_scores(net.state_dict(), {n: list(t.shape) for n, t in net.state_dict().items()},
        ...                          model=net, local=torch.ones(3, 4))
        >>> scores["dead_rows"], scores["silent"], scores["off_centre"], scores["architecture"]
        (0.5, 0.5, 0.0, 0.0)
    """
    if not len(local):
        raise ValueError("download_scores: the client's check needs at least one of its inputs")
    same = set(received) == set(expected) and all(list(received[n].shape) == list(expected[n]) for n in received)
    matrices = [t for t in received.values() if t.is_floating_point() and t.dim() >= 2 and len(t) >= 2]
    cosines, dead = [0.0], [0.0]
    for matrix in matrices:
        dead.append(float((matrix.detach().flatten(1).norm(dim=1) == 0).double().mean()))
        cosines.append(float(row_cosines(matrix).max()))
    scale = [0.0]
    for name, tensor in received.items():
        weight = received.get(name.removesuffix(".bias") + ".weight")
        if name.endswith(".bias") and weight is not None and weight.dim() >= 2:
            fan_in = int(weight[0].numel())
            scale.append(float(tensor.detach().abs().max()) * fan_in ** 0.5)
    fired = relu_firing(model, local)  # one pass for the first layer's rate and every layer's rare units
    rate = float(fired[0][1].mean()) if fired else 0.5
    return {"architecture": 0.0 if same else 1.0, "aligned": max(cosines), "silent": 1.0 - rate,
            "off_centre": abs(rate - 0.5), "dead_rows": max(dead), "rare_units": rare_share(fired),
            "bias_scale": max(scale),
            "drift": drift(received, previous)}

