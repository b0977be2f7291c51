"""Resumable sweeps: a finished config is not run again, and a finished training is attacked again, not rerun."""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import privbench
from privbench.io import files_named
from privbench.regular import read_text

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
            metrics: dict[str, Any] = json.loads(read_text(path, root=root))  # regular files, at most 64 MiB
        except (OSError, ValueError):
            continue
        if not isinstance(metrics, dict) or not isinstance(metrics.get("run", {}), dict):
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


#: Under ``results_dir``: one lock file per config key while an audit of that config runs.
RUNNING = ".privbench-running"


@contextmanager
def config_lock(results_dir: Path, key: str, *, poll: float = 0.5) -> Iterator[None]:
    """Hold the lock of config ``key`` under ``results_dir`` for the block; while a live process holds it, wait.

    An identical run started beside another so trains once: it waits, then finds the other's result finished.
    """
    from privbench.io import alive, umask
    from privbench.progress import log

    folder = Path(results_dir) / RUNNING
    lock, said = folder / f"{key}.lock", False
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666 & ~umask())
            break
        except FileNotFoundError:
            continue  # the folder went between mkdir and open
        except FileExistsError:
            try:
                text, age = lock.read_text().strip(), time.time() - lock.stat().st_mtime
            except OSError:
                continue
            holder = int(text) if text.isdigit() else 0
            if (holder and not alive(holder)) or (not holder and age > 5) or holder == os.getpid():
                lock.unlink(missing_ok=True)  # left by a run that is gone
                continue
            if not said:
                log.info("waiting: an identical run (pid %s) is running; its result will be reused", holder)
                said = True
            time.sleep(poll)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{os.getpid()}\n")
    try:
        yield
    finally:
        try:
            if lock.read_text().strip() == str(os.getpid()):
                lock.unlink()
            folder.rmdir()  # only when no other run holds a lock in it
        except OSError:
            pass
