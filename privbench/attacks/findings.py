"""What an attack answers, one typed result per family: the evaluator scores each against the ground truth.

``Reconstruction``: images (and labels) rebuilt from a message. ``MembershipScores``: a score per
candidate record (higher: more likely a member). ``InferredLabels``: the labels (classes and their
counts) a message was computed from. ``InferredProperty``: any other property of a client's data.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Finding:
    """The part every result shares: the record of the attack's attempts and free-form figures."""

    attempts: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """True when the attack produced nothing to score."""
        return False


@dataclass
class Reconstruction(Finding):
    """The best attempt's images ``[N, C, H, W]`` and labels, or None when every attempt diverged.

    ``objective`` is its final relative objective; ``label_source`` how the labels were obtained
    (``none``: not at all); ``pixels`` says the images are already in [0, 1] (else in model input space).
    """

    images: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    objective: float = float("nan")
    label_source: str = "optimised"
    pixels: bool = False

    @property
    def failed(self) -> bool:
        """True when every attempt diverged (no reconstruction to score)."""
        return self.images is None


@dataclass
class MembershipScores(Finding):
    """One score per candidate record (``candidates``: their ids in the view's candidate pool)."""

    scores: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    candidates: list[int] = field(default_factory=list)


@dataclass
class SourceGuesses(Finding):
    """Source inference: each candidate record's loss under each client's model (``[records, clients]``); the
    guess is the client of the smallest."""

    losses: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 0))
    clients: list[str] = field(default_factory=list)

    @property
    def guesses(self) -> torch.Tensor:
        """The guessed client (its index in ``clients``) of each record."""
        return self.losses.argmin(1)


@dataclass
class CanaryScores(MembershipScores):
    """A one-run audit's score per canary (higher: more likely included) and how many it guesses each way:
    the ``guesses`` highest in, the ``guesses`` lowest out, the rest abstained."""

    guesses: int = 0


@dataclass
class InferredLabels(Finding):
    """The classes a message was computed from and how many images of each (class -> count)."""

    counts: dict[int, int] = field(default_factory=dict)

    @property
    def classes(self) -> set[int]:
        """The classes present (count > 0)."""
        return {c for c, n in self.counts.items() if n > 0}


@dataclass
class InferredProperty(Finding):
    """A named property of a client's data (for example its class proportions)."""

    name: str = ""
    value: Any = None
