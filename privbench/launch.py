"""Before Hydra starts: the command line parsed as Hydra parses it, every sweep job's plan checked, and the folders
it will write into checked against finished runs (and remembered, so that none privbench did not create is removed)."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from privbench.errors import ConfigError, PrivbenchError

#: Hydra's options that load files outside privbench's checks, by destination: the rerun unpickles its file; the
#: others replace privbench's config tree (``--config-dir`` and ``hydra.searchpath`` add to it, and are checked).
REFUSED_DESTINATIONS = {"experimental_rerun": "--experimental-rerun", "config_path": "--config-path",
                        "config_name": "--config-name"}
#: A sweep of more settings than this says that it checks their plans (it takes about a second each).
SAY_FROM = 8
#: The environment variable that hands the folders that existed before the launch to its jobs (``os.pathsep``).
EXISTED = "PRIVBENCH_EXISTED"


def hydra_arguments(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed by Hydra's own parser (so ``--exp``, ``--config-p=D``, ``-cpD`` mean what Hydra takes them to
    mean); a refused option, by destination, or a parse error ends in a ``ConfigError``."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()

    def error(message: str) -> Any:
        raise ConfigError(message)

    parser.error = error  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    for dest, option in REFUSED_DESTINATIONS.items():
        if getattr(args, dest, None) is not None:
            given = next((a.split("=", 1)[0] for a in argv if a.startswith("-") and _destination(parser, a) == dest),
                         option)
            spelt = option if given == option else f"{option} (given as {given})"
            raise ConfigError(f"{spelt}: not accepted (it loads a config or a pickled job from a file outside "
                              "privbench's checks); add configs through hydra.searchpath or --config-dir")
    return args


def _destination(parser: argparse.ArgumentParser, arg: str) -> str | None:
    """Which refused destination ``arg`` (one option, its value attached or not) sets under ``parser``."""
    for attempt in ([arg], [arg, "x"]):
        try:
            args = parser.parse_args(attempt)
        except ConfigError:
            continue
        return next((d for d in REFUSED_DESTINATIONS if getattr(args, d, None) is not None), None)
    return None


def sweep_jobs(overrides: list[str], full: DictConfig) -> list[list[str]] | None:
    """Each job's task overrides, as Hydra's basic sweeper expands ``hydra.sweeper.params`` and ``overrides`` (the
    command line's task overrides); None under another sweeper."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from privbench.config_dir import hydra_session

    sweeper = OmegaConf.to_container(full.hydra.sweeper, resolve=False)
    assert isinstance(sweeper, dict)
    if not str(sweeper.get("_target_", "")).endswith(".BasicSweeper"):
        return None
    args = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()] + list(overrides)
    with hydra_session():  # privbench's configs and --config-dir's, as Hydra will sweep them
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        batches = BasicSweeper.split_arguments(parser.parse_overrides(args), None)
    return [list(job) for batch in batches for job in batch]


def _first_values(overrides: list[str]) -> list[str]:
    """``overrides`` with each sweep replaced by its first value (a config Hydra can compose)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from privbench.overrides import _sweep_values

    out = []
    for o in OverridesParser.create().parse_overrides(overrides):
        if o.is_sweep_override():
            out.append(f"{o.get_key_element()}={_sweep_values(o)[0]}")
        else:
            out.append(str(o.input_line))
    return out


def check_launch(overrides: list[str], *, multirun: bool) -> list[Path]:
    """Check what Hydra is about to launch; returns the folders that existed before it (``protect`` keeps them).

    A sweep's every job is composed and planned (``privbench.audit.plan.preflight``: values, the attack and payload
    pairing, sizes against the model and data, the rounds an attack needs) before job 0 runs; a job whose folder
    holds a finished run of other overrides is refused, as is a single run's.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    from privbench.overrides import compose_with_hydra

    parsed = OverridesParser.create().parse_overrides(overrides)
    hydra_part = [str(o.input_line) for o in parsed if o.is_hydra_override()]
    task = [str(o.input_line) for o in parsed if not o.is_hydra_override()]
    full = compose_with_hydra(_first_values(overrides))
    multirun = multirun or full.hydra.mode == RunMode.MULTIRUN
    if not multirun:
        folder = _job_folder(full, sweep=False, num=0)
        _check_not_finished(folder, task, "hydra.run.dir")
        return [_existing(folder)]
    jobs = sweep_jobs(task, full)
    sweep_dir = Path(str(_job_folder(full, sweep=True, num=0))).parent
    existed = [_existing(sweep_dir)]
    if jobs is None:
        return existed
    settings = {tuple(sorted(o for o in job if not o.startswith("seed="))) for job in jobs}
    if len(settings) > SAY_FROM:
        print(f"checking the plans of {len(jobs)} jobs ({len(settings)} settings) before job 1 starts", flush=True)
    prepared: set[tuple[str, ...]] = set()
    for num, job in enumerate(jobs):
        setting = tuple(sorted(o for o in job if not o.startswith("seed=")))
        try:
            cfg = _planned(hydra_part + job, prepare=setting not in prepared)
            prepared.add(setting)
        except PrivbenchError as exc:
            raise type(exc)(f"job {num + 1}/{len(jobs)} ({' '.join(job)[:120]}): {exc}") from None
        folder = _job_folder(cfg, sweep=True, num=num)
        _check_not_finished(folder, job, "hydra.sweep.dir")
        if folder.exists():
            existed.append(folder)
    return existed


def _planned(overrides: list[str], *, prepare: bool) -> DictConfig:
    """The composed config of one job, after every check its audit makes before training (``plan``; and with
    ``prepare``, the data, model and sizes: once per setting, its seeds share them)."""
    from privbench.audit.plan import plan, preflight
    from privbench.overrides import _check_composes, hydra_context, job_config

    full = _check_composes(overrides)
    with hydra_context(full):
        job = job_config(full)
    preflight(job) if prepare else plan(job)
    return full


def _job_folder(full: DictConfig, *, sweep: bool, num: int) -> Path:
    from privbench.hydra_keys import job_folder

    return Path(os.path.abspath(job_folder(full, sweep=sweep, num=num)))


def _existing(folder: Path) -> Path:
    """The deepest of ``folder`` and its parents that exists."""
    return next((p for p in [folder, *folder.parents] if p.exists()), Path("/"))


def _check_not_finished(folder: Path, task: list[str], key: str) -> None:
    """Refuse a job whose folder holds a finished run (or a sweep's pointer to one) of other overrides."""
    for name in ("metrics.json", "resumed.json"):
        path = folder / name
        if not path.is_file():
            continue
        try:
            recorded = json.loads(path.read_text())
        except (OSError, ValueError):
            recorded = {}
        run = recorded.get("run", recorded) if isinstance(recorded, dict) else {}
        theirs = run.get("overrides") if isinstance(run, dict) else None
        if theirs is None and name == "resumed.json":
            continue  # an older pointer: it does not say which job it was
        if sorted(map(str, theirs or [])) != sorted(task):
            raise ConfigError(f"{key}: {folder} holds a finished run of other overrides "
                              f"({' '.join(map(str, theirs or [])) or 'none'}); it is never written over: choose "
                              "another folder (or leave the default, which is new for each launch)")


def remember(existed: list[Path]) -> None:
    """Hand the folders that existed before the launch to its jobs (joblib workers inherit the environment)."""
    os.environ[EXISTED] = os.pathsep.join(str(p) for p in existed)


def protected(folder: Path) -> bool:
    """Whether ``folder`` must not be removed: it, or a folder below it, existed before the launch (``remember``), or
    it holds the working directory."""
    folder = Path(os.path.abspath(folder))
    kept = [Path(p) for p in os.environ.get(EXISTED, "").split(os.pathsep) if p]
    return any(p == folder or p.is_relative_to(folder) for p in [*kept, Path.cwd(), Path.home()])
