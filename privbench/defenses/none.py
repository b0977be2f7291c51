"""The undefended baseline: payloads go out exactly as computed."""
from __future__ import annotations

from typing import Any

import torch

from privbench.payloads import Payload
from privbench.payloads.transform import MessageTransform


class NoDefense(MessageTransform):
    """No defence (``defense=none``): every payload is sent unchanged.

    Example:
        >>> NoDefense().describe()
        {'defense': 'none'}
    """

    name = "none"

    def __init__(self, *, seed: int = 0) -> None:
        del seed

    def protect(self, payload: Payload, base: dict[str, torch.Tensor] | None = None) -> Payload:
        """Return ``payload`` unchanged."""
        return payload

    def describe(self) -> dict[str, Any]:
        """Settings recorded with the results."""
        return {"defense": self.name}
