"""Resumable sweeps: a run is keyed by its resolved config; a finished key is not run again."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

#: Keys that say where results go, not what is computed.
NOT_KEYED = ("results_dir", "resume")


def config_key(cfg: DictConfig) -> str:
    """sha256 of the resolved config without ``NOT_KEYED`` keys."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(plain, dict)
    for key in NOT_KEYED:
        plain.pop(key, None)
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()


def finished(results_dir: Path, key: str) -> Path | None:
    """The folder of a finished run (complete ``metrics.json``) with ``key`` under ``results_dir``."""
    root = Path(results_dir)
    if not root.exists():
        return None
    for path in sorted(root.rglob("metrics.json")):
        try:
            metrics: dict[str, Any] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if metrics.get("run", {}).get("config_key") == key:
            return path.parent
    return None
