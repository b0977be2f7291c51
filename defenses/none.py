"""The undefended baseline: payloads go out exactly as computed."""
from __future__ import annotations

from privbench.payloads import Payload


class NoDefense:
    """No defence (``defense=none``): every payload is sent unchanged.

    Defences implement ``protect(payload) -> payload`` and ``describe() -> dict``.
    """

    name = "none"

    def protect(self, payload: Payload) -> Payload:
        """Return ``payload`` unchanged."""
        return payload

    def describe(self) -> dict:
        """Settings recorded with the results."""
        return {"defense": self.name}
