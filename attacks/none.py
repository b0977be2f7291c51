"""No attack: train, count bytes and score accuracy only (``attack=none``)."""
from __future__ import annotations

from privbench.payloads import KINDS


class NoAttack:
    """Placeholder-free opt-out: the audit skips payload selection and reconstruction."""

    name = "none"
    reads = tuple(KINDS)

    def cannot_read(self, kind: str) -> str | None:
        """Every payload is acceptable because none is read."""
        return None
