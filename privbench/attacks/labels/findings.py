"""A label attack's answer: classes and their counts."""
from __future__ import annotations

from dataclasses import dataclass, field

from privbench.attacks.findings import Finding


@dataclass
class InferredLabels(Finding):
    """The classes a message was computed from and how many images of each (class -> count)."""

    counts: dict[int, int] = field(default_factory=dict)

    @property
    def classes(self) -> set[int]:
        """The classes present (count > 0)."""
        return {c for c, n in self.counts.items() if n > 0}
