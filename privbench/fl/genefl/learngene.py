"""learnGene condensation: layers, their sensitivity score xi, and which layers form the gene."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from privbench.errors import ConfigError

SCORES = ("cos_per_dim", "cos", "update_norm")
SELECTS = ("top", "bottom", "random")


def _flat(state: dict[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    return torch.cat([state[n].detach().double().flatten() for n in names])


def xi_scores(after: dict[str, torch.Tensor], before: dict[str, torch.Tensor], layer_params: dict[str, list[str]], *,
              score: str = "cos_per_dim") -> dict[str, float]:
    """Per-layer scores of the local update, normalised so their absolute values sum to 1.

    ``cos_per_dim``: ``cos(theta_l, theta~_l) / dim(theta_l)`` (the paper's Eq. 9);
    ``cos``: the cosine alone; ``update_norm``: ``||theta_l - theta~_l||``. Only a layer's
    parameters (not buffers) enter the score. Dividing by the sum of absolute values keeps
    every score's sign and the ranking (a plain sum can be negative and would reverse it).

    Example:
        >>> before = {"a": torch.ones(2), "b": torch.ones(2)}
        >>> xi_scores({"a": -torch.ones(2), "b": torch.ones(2)}, before, {"a": ["a"], "b": ["b"]}, score="cos")
        {'a': -0.5, 'b': 0.5}
    """
    if score not in SCORES:
        raise ConfigError(f"fl.gene.score={score!r} is not one of {', '.join(SCORES)}")
    raw = {}
    for layer, names in layer_params.items():
        a, b = _flat(after, names), _flat(before, names)
        if score == "update_norm":
            raw[layer] = float(torch.linalg.vector_norm(a - b))
        else:
            cos = float(F.cosine_similarity(a, b, dim=0, eps=1e-12))
            raw[layer] = cos / a.numel() if score == "cos_per_dim" else cos
    total = sum(abs(v) for v in raw.values())
    if not math.isfinite(total) or total == 0:
        return {k: 1.0 / len(raw) for k in raw}
    return {k: v / total for k, v in raw.items()}


def gene_size(gamma: float, num_layers: int) -> int:
    """Number of layers kept: ``gamma`` itself if >= 1 (a count), else ``ceil(gamma * L)``."""
    if gamma <= 0:
        raise ConfigError(f"fl.gene.gamma must be > 0 (a count >= 1 or a fraction < 1), got {gamma}")
    count = int(gamma) if gamma >= 1 else math.ceil(gamma * num_layers)
    if count > num_layers:
        raise ConfigError(f"fl.gene.gamma={gamma} exceeds the model's {num_layers} layers")
    return count


def rank_layers(scores: dict[str, float], *, select: str = "top", rng: np.random.Generator | None = None) -> list[str]:
    """Every layer in the order ``select`` prefers it: highest score first, lowest first, or a seeded
    random permutation. Ties are broken by model order."""
    names = list(scores)
    if select == "top":
        return sorted(names, key=lambda n: (-scores[n], names.index(n)))
    if select == "bottom":
        return sorted(names, key=lambda n: (scores[n], names.index(n)))
    if select == "random":
        rng = rng or np.random.default_rng(0)
        return [names[i] for i in rng.permutation(len(names))]
    raise ConfigError(f"fl.gene.select={select!r} is not one of {', '.join(SELECTS)}")


def select_layers(scores: dict[str, float], count: int, *, select: str = "top", rng: np.random.Generator | None = None) -> list[str]:
    """The ``count`` gene layers by ``select``: highest scores, lowest, or a seeded random draw.

    Returned in model order. Ties are broken by model order.
    """
    names = list(scores)
    if select == "random":  # a draw of ``count`` (kept as the runs before rank_layers drew it)
        rng = rng or np.random.default_rng(0)
        chosen = [names[i] for i in rng.choice(len(names), count, replace=False)]
    else:
        chosen = rank_layers(scores, select=select)[:count]
    return [n for n in names if n in chosen]


def select_by_size(scores: dict[str, float], sizes: dict[str, int], fraction: float, *, select: str = "top",
                   rng: np.random.Generator | None = None) -> list[str]:
    """Gene layers taken in ``select`` order until they hold ``fraction`` of the model's elements.

    The layer that reaches the fraction is kept (so at least one layer is), the rest are not.
    Returned in model order. ``sizes``: each layer's element count (what its upload carries).

    Example:
        >>> select_by_size({"a": 0.5, "b": 0.3, "c": 0.2}, {"a": 10, "b": 30, "c": 60}, 0.3)
        ['a', 'b']
    """
    if not 0 < fraction <= 1:
        raise ConfigError(f"fl.gene.gamma={fraction} must be a fraction in (0, 1] with fl.gene.budget=size")
    total, kept, chosen = sum(sizes.values()), 0, set()
    for name in rank_layers(scores, select=select, rng=rng):
        chosen.add(name)
        kept += sizes[name]
        if kept >= fraction * total:
            break
    return [n for n in scores if n in chosen]


def adapt_gamma(gamma: float, previous: float | None, current: float, *, step: float, low: float, high: float,
                tolerance: float = 0.0) -> float:
    """The next round's gamma of a client from its performance signal (privbench's reading; see docs/protocol.md).

    ``current``/``previous``: the accuracy, on the client's own data, of the model it received this round
    and in its previous round. When the received model lost ground (by more than ``tolerance``), the
    client shares more (``gamma + step``); when it gained, it condenses further (``gamma - step``);
    clipped to ``[low, high]``.

    Example:
        >>> adapt_gamma(0.5, 0.80, 0.70, step=0.1, low=0.1, high=1.0)
        0.6
        >>> adapt_gamma(0.5, 0.70, 0.80, step=0.1, low=0.1, high=1.0)
        0.4
    """
    if previous is None or abs(current - previous) <= tolerance:
        return gamma
    moved = gamma + step if current < previous else gamma - step
    return round(min(max(moved, low), high), 12)


def cluster_gene(uploaded: list[list[str]], all_layers: list[str], count: int) -> list[str]:
    """Layers uploaded by a strict majority of the cluster's clients in a round.

    If no layer has a majority, the ``count`` most-uploaded layers (ties by model order).
    """
    freq = {layer: sum(layer in u for u in uploaded) for layer in all_layers}
    majority = [layer for layer in all_layers if 2 * freq[layer] > len(uploaded)]
    if majority:
        return majority
    ranked = sorted(all_layers, key=lambda layer: (-freq[layer], all_layers.index(layer)))
    return [layer for layer in all_layers if layer in ranked[:count]]
