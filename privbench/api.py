"""The Python API: compose a config from overrides and run one audit in-process.

Example:
    >>> import privbench
    >>> result = privbench.run(["fl.rounds=1", "attack.iterations=10"], results_dir="/tmp/pb")  # doctest: +SKIP
    >>> result.metrics["privacy"]["psnr_gain"], result.run_dir  # doctest: +SKIP
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from privbench.overrides import compose, compose_full, hydra_context, job_config

__all__ = ["AuditResult", "compose", "preflight", "run"]


#: Files an audit writes in its run folder (those that exist are listed in ``AuditResult.files``).
RUN_FILES = ("metrics.json", "metrics.csv", "threat_model.json", "comm.json", "config.yaml", "grid.png",
             "gallery.npz", "run.log")


@dataclass(frozen=True)
class AuditResult:
    """What one audit produced.

    Attributes:
        metrics: the contents of ``metrics.json`` as written (sections run, privacy, utility,
            bytes, timing, threat_model, defense; a missing value is None).
        run_dir: the run's folder.
        files: the run's files by name (``metrics.json``, ``grid.png``, ...), those that exist.
        payloads: the payload store's folder, or None when the run reused another run's training.
    """

    metrics: dict[str, Any]
    run_dir: Path
    files: dict[str, Path] = field(default_factory=dict)
    payloads: Path | None = None

    @property
    def privacy(self) -> dict[str, Any]:
        """The ``privacy`` section: PSNR/SSIM/LPIPS, their chance levels and gains."""
        return dict(self.metrics.get("privacy", {}))


def run(overrides: Sequence[str] = (), *, config: DictConfig | None = None, run_dir: str | Path | None = None,
          **values: Any) -> AuditResult:
    """Run one audit in this process and return its result.

    Args:
        overrides: Hydra overrides, as on the command line (``["attack=ig", "fl.rounds=2"]``).
        config: a config from ``compose`` (changed as you like) instead of ``overrides``.
        run_dir: the run's folder; by default ``results_dir/name/<timestamp>`` as on the command line.
        **values: top-level values appended as overrides, e.g. ``results_dir="/tmp/pb"``, ``seed=3``.

    Raises:
        privbench.errors.PrivbenchError: bad input (one-line message), raised before any compute.
    """
    from privbench.audit.run import run_audit

    if config is not None and (overrides or values):
        raise TypeError("give either overrides (and values) or config, not both")
    if config is None:
        full = compose_full([*overrides, *(f"{k}={v}" for k, v in values.items())])
        with hydra_context(full):
            out = Path(run_dir) if run_dir is not None else Path(str(full.hydra.run.dir))
            job = job_config(full)
            metrics = run_audit(job, out)
        results = Path(str(job.results_dir))
    else:
        cfg = config.copy()
        OmegaConf.resolve(cfg)
        out = Path(run_dir) if run_dir is not None else Path(str(cfg.results_dir)) / str(cfg.name) / _now()
        metrics = run_audit(cfg, out)
        results = Path(str(cfg.results_dir))
    folder = out if _holds(out, metrics) else _finished_folder(results, metrics)  # another folder: claimed, resumed
    files = {name: folder / name for name in RUN_FILES if (folder / name).exists()}
    metrics = json.loads((folder / "metrics.json").read_text())  # as written: missing values are None
    payloads = folder / "payloads" if (folder / "payloads").is_dir() else None
    return AuditResult(metrics=metrics, run_dir=folder, files=files, payloads=payloads)


def _holds(folder: Path, metrics: dict[str, Any]) -> bool:
    """Whether ``folder`` holds the run ``metrics`` came from (not an earlier run that finished in the folder Hydra
    named for this one: a run never writes over it and takes ``<folder>-2``)."""
    try:
        written = json.loads((folder / "metrics.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(written.get("run", {}).get("config_key") == metrics["run"]["config_key"])


def _finished_folder(results: Path, metrics: dict[str, Any]) -> Path:
    """Where the run that ``metrics`` came from lives (a resumed run returns an earlier run's metrics)."""
    from privbench.audit.resume import finished, finished_runs

    folder = finished(finished_runs(results), metrics["run"]["config_key"])
    assert folder is not None
    return folder


def _now() -> str:
    from datetime import datetime

    return datetime.now().strftime("%Y-%m-%d_%H-%M-%S")


def preflight(overrides: Sequence[str] = ()) -> DictConfig:
    """Run every check ``run`` makes before training (overrides, values, plan, data, model, capture); return the config.

    Raises:
        privbench.errors.PrivbenchError: the first problem found, as one line naming the key.
    """
    from privbench.audit.plan import preflight as check

    full = compose_full(overrides)
    with hydra_context(full):
        job = job_config(full)
    check(job)
    return job
