"""A property attack's answer: a named property of a client's data."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from privbench.attacks.findings import Finding


@dataclass
class InferredProperty(Finding):
    """A named property of a client's data (for example its class proportions)."""

    name: str = ""
    value: Any = None
