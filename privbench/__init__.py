"""privbench: a privacy testbed for GENE-FL and federated baselines."""
from __future__ import annotations

from typing import Any

from privbench.naming import register as _register_resolvers

__version__ = "0.1.0"
_register_resolvers()
__all__ = ["AuditResult", "compose", "run", "__version__"]


def __getattr__(name: str) -> Any:
    """``privbench.run``, ``privbench.compose`` and ``privbench.AuditResult``, imported on first use."""
    if name in ("run", "compose", "AuditResult"):
        # loaded only on this attribute access: importing privbench.attacks (say) never loads the audit
        import importlib

        return getattr(importlib.import_module("privbench.api"), name)
    raise AttributeError(f"module 'privbench' has no attribute {name!r}")
