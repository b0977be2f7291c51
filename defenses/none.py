"""The undefended baseline: payloads go out exactly as computed."""
from __future__ import annotations

from privbench.payloads import Payload


class NoDefense:
    """No defence (``defense=none``): every payload is sent unchanged.

    Defences implement ``protect(payload, base) -> payload`` (``base``: the model the
    client received, for model uploads) and ``describe() -> dict``.
    """

    name = "none"

    def __init__(self, *, seed: int = 0) -> None:
        del seed

    def protect(self, payload: Payload, base=None) -> Payload:
        """Return ``payload`` unchanged."""
        return payload

    def describe(self) -> dict:
        """Settings recorded with the results."""
        return {"defense": self.name}
