"""What an attack answers: a typed ``Finding`` per family (each family's ``findings.py``), which the evaluator
scores against the ground truth with the scorer registered for its type."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Finding:
    """The part every result shares: the record of the attack's attempts and free-form figures."""

    attempts: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """True when the attack produced nothing to score."""
        return False


