"""The evaluator's contract: the truth it holds (``Truth``), how it scores (``Scoring``) and the scorer of each
finding type (``register_scorer``; each family's scorer lives with its game, ``privbench.audit.games``), so the
attack phase needs no change for a new family (``docs/extending.md``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from privbench.attacks.base import Attack
from privbench.attacks.findings import Finding
from privbench.audit.games import discover
from privbench.metrics.reconstruction import Recovered

F = TypeVar("F", bound=Finding)


@dataclass(frozen=True)
class Truth:
    """What only the evaluator holds about one attacked message.

    Attributes:
        images: the private images it was computed from, ``[N, C, H, W]`` in [0, 1] on the CPU.
        labels: their labels.
        non_members: images no client holds (the test split), for chance baselines.
        non_member_labels: their labels (for the class-informed baselines; None: those are not scored).
        class_frequencies: each class's share of the training split (what a prior knows).
        mean: per-channel input mean (to bring reconstructions to [0, 1]).
        std: per-channel input std.
        membership: for a membership game, which candidates of the view are members (None otherwise).
        owners: for source inference, each candidate's client (its index in the view's clients).
        holders: for source inference, how many of the view's clients hold each candidate's class.
        informed_scores: for a membership game whose candidates differ in class, the same test's scores from
            records that carry only the class (its AUC is the informed chance; None: the game is class-matched).
    """

    images: torch.Tensor
    labels: torch.Tensor
    non_members: torch.Tensor
    class_frequencies: torch.Tensor
    mean: tuple[float, ...]
    std: tuple[float, ...]
    membership: torch.Tensor | None = None
    non_member_labels: torch.Tensor | None = None
    owners: torch.Tensor | None = None
    holders: torch.Tensor | None = None
    informed_scores: torch.Tensor | None = None


@dataclass(frozen=True)
class Scoring:
    """How to score: the run's seed, the matching cost, LPIPS on or off, where a scorer writes its files, and when
    a true image counts as recovered."""

    seed: int
    match_on: str
    use_lpips: bool
    out: Path
    recovered: Recovered = Recovered()


Scorer = Callable[[Any, Any, Attack, Truth, Scoring], dict[str, Any]]
SCORERS: dict[type[Finding], Scorer] = {}


def register_scorer(kind: type[F]) -> Callable[[Callable[[F, Any, Attack, Truth, Scoring], dict[str, Any]]],
                                                 Callable[[F, Any, Attack, Truth, Scoring], dict[str, Any]]]:
    """Register the scorer of findings of type ``kind`` (and its subclasses, unless they have their own)."""
    def add(fn: Callable[[F, Any, Attack, Truth, Scoring], dict[str, Any]]) -> Callable[[F, Any, Attack, Truth, Scoring], dict[str, Any]]:
        SCORERS[kind] = fn
        return fn
    return add


def score_finding(finding: Finding, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """The privacy figures of ``finding`` (by the scorer of its type), plus the attack's evaluator-side figures."""
    scorer = next((SCORERS[t] for t in type(finding).__mro__ if t in SCORERS), None)
    if scorer is None:
        discover()  # each family's game module registers its scorer
        scorer = next((SCORERS[t] for t in type(finding).__mro__ if t in SCORERS), None)
    if scorer is None:
        raise TypeError(f"no scorer is registered for {type(finding).__name__} (privbench.audit.score.register_scorer)")
    return {**scorer(finding, view, attack, truth, how), **attack.evaluate(view, truth.images)}
