"""Checks every config value can hold before planning: finite numbers, each key in the range its constructor declares
(``privbench.schema``), an integer seed, a boolean ``resume``."""
from __future__ import annotations

import math
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from privbench.errors import SHOWN, ConfigError, shown
from privbench.schema import Flag, check_schema

#: Seeds are integers in [0, 2**32): numpy, torch and Python's random all take them.
SEED_LIMIT = 2**32


def unresolvable(cfg: DictConfig, exc: Exception) -> ConfigError:
    """The one-line error for an interpolation in ``cfg`` that does not resolve, naming its key."""
    key = getattr(exc, "full_key", None) or ""
    if not key:
        raw = OmegaConf.to_container(cfg, resolve=False)
        for leaf, value in _leaves(raw):
            if isinstance(value, str) and "${" in value and not value.startswith("${hydra:"):
                try:
                    OmegaConf.select(cfg, leaf, throw_on_resolution_failure=True)
                except OmegaConfBaseException:
                    key = leaf
                    break
    text = str(exc).splitlines()[0]
    return ConfigError(f"{key + ': ' if key else ''}cannot resolve: {text if len(text) <= SHOWN else text[:SHOWN] + '...'}")


def _leaves(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        return [leaf for k, v in node.items() for leaf in _leaves(v, f"{prefix}{k}.")]
    if isinstance(node, list):
        return [leaf for i, v in enumerate(node) for leaf in _leaves(v, f"{prefix}{i}.")]
    return [(prefix.rstrip("."), node)]


def check_values(cfg: DictConfig) -> None:
    """Raise a one-line ``ConfigError`` for a value no run can use.

    Example:
        >>> check_values(OmegaConf.create({"seed": 0, "fl": {"lr": float("nan")}}))
        Traceback (most recent call last):
        ...
        privbench.errors.ConfigError: fl.lr=nan: must be a finite number
    """
    try:  # `name` is resolved by Hydra's app (it reads the runtime choices), not here
        resolved = {key: OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
                    for key in cfg if key != "name" for node in [cfg[key]]}
    except OmegaConfBaseException as exc:
        raise unresolvable(cfg, exc) from None
    for key, value in _leaves(resolved):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}={value}: must be a finite number")
    check_schema({str(k): v for k, v in resolved.items()})
    seed = OmegaConf.select(cfg, "seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
        raise ConfigError(f"seed={shown(seed)}: must be an integer in [0, 2^32)")
    if "resume" in cfg and (problem := Flag().problem(cfg.resume)):
        raise ConfigError(f"resume={shown(cfg.resume)}: {problem}")
