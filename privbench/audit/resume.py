"""Resumable sweeps: a finished config is not run again, and a finished training is attacked again, not rerun."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import privbench
from privbench.io import files_named

#: Keys that say where results go, not what is computed.
NOT_KEYED = ("results_dir", "resume", "allow_targets")
#: Keys that choose what is attacked and how it is scored, not what is trained.
NOT_TRAINED = ("name", "payload", "attack", "metrics")


def _key(cfg: DictConfig, drop: tuple[str, ...]) -> str:
    plain = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(plain, dict)
    for key in drop:
        plain.pop(key, None)
    plain["privbench_version"] = privbench.__version__  # an upgrade runs again, it does not reuse old results
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()


def config_key(cfg: DictConfig) -> str:
    """sha256 of the resolved config without ``NOT_KEYED`` keys, and of privbench's version."""
    return _key(cfg, NOT_KEYED)


def training_key(cfg: DictConfig) -> str:
    """sha256 of what determines the training (and so every recorded message): no payload, attack or metrics."""
    return _key(cfg, NOT_KEYED + NOT_TRAINED)


def finished_runs(results_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every finished run (a complete ``metrics.json``) under ``results_dir``: its folder and ``run`` section."""
    root = Path(results_dir)
    if not root.exists():
        return []
    out = []
    for path in files_named(root, "metrics.json"):
        try:
            metrics: dict[str, Any] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        out.append((path.parent, metrics.get("run", {})))
    return out


def finished(runs: list[tuple[Path, dict[str, Any]]], key: str) -> Path | None:
    """The folder of the run in ``runs`` (from ``finished_runs``) whose config has ``key``."""
    return next((folder for folder, run in runs if run.get("config_key") == key), None)


def trained(runs: list[tuple[Path, dict[str, Any]]], key: str) -> Path | None:
    """The folder of the run in ``runs`` that trained itself with ``training_key`` ``key`` (a run that reused
    another's training holds no payloads: never this one)."""
    return next((folder for folder, run in runs if run.get("training_key") == key and not run.get("trained_in")),
                None)
