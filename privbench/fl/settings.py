"""Nested protocol settings (e.g. ``fl.gene.*``) built from config dicts with key checking."""
from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

from privbench.errors import ConfigError, did_you_mean

T = TypeVar("T")


def settings(cls: type[T], values: dict[str, Any] | None, *, key: str) -> T:
    """Build dataclass ``cls`` from ``values``; unknown keys raise a ``ConfigError`` naming them."""
    values = dict(values or {})
    allowed = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        hint = did_you_mean(unknown[0], allowed, prefix=f"{key}.")
        raise ConfigError(f"{key}.{unknown[0]}: unknown key{hint}; allowed keys: {', '.join(allowed)}")
    return cls(**values)
