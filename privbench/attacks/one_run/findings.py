"""The one-run auditor's answer: a score per canary and how many it guesses each way."""
from __future__ import annotations

from dataclasses import dataclass

from privbench.attacks.membership.findings import MembershipScores


@dataclass
class CanaryScores(MembershipScores):
    """A one-run audit's score per canary (higher: more likely included) and how many it guesses each way:
    the ``guesses`` highest in, the ``guesses`` lowest out, the rest abstained."""

    guesses: int = 0
