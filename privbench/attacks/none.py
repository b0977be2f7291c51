"""No attack: train, count bytes and score accuracy only (``attack=none``)."""
from __future__ import annotations

from typing import Any

from privbench.attacks.base import Attack
from privbench.attacks.findings import Finding


class NoAttack(Attack[Any, Finding]):
    """The opt-out: the audit skips payload selection and reconstruction.

    Example:
        >>> NoAttack().cannot_read("global_model") is None
        True
    """

    name = "none"

    def cannot_read(self, kind: str) -> str | None:
        """Every payload is acceptable because none is read."""
        return None

    def attack(self, view: Any, *, seed: int) -> Finding:
        """Never called: the audit reads no payload for ``attack=none``."""
        raise RuntimeError("attack=none reads no payload")
