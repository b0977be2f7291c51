"""A membership attack's answer: a score per candidate record, or a guessed source per record."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from privbench.attacks.findings import Finding


@dataclass
class MembershipScores(Finding):
    """One score per candidate record (``candidates``: their ids in the view's candidate pool)."""

    scores: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    candidates: list[int] = field(default_factory=list)


@dataclass
class LadderScores(MembershipScores):
    """Several tests' scores of the same candidates (``rungs`` by name, e.g. ``rmia_online@8``); ``scores`` are the
    headline rung's; ``skipped``: the rungs that could not run, with why."""

    rungs: dict[str, torch.Tensor] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


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
