"""Hydra's own keys on the command line: those that write, run or load are checked (after interpolation) or refused."""
from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from privbench.errors import ConfigError, shown

#: ``hydra.*`` keys an override may not set: they instantiate code, run shell lines, set the job's environment or
#: write logs where they say.
HYDRA_REFUSED = ("hydra.callbacks", "hydra.job_logging", "hydra.hydra_logging", "hydra.job.env_set",
                 "hydra.job.env_copy")
#: ``hydra.*`` keys the command line may set (a key below one of these too); every other ``hydra.*`` key is refused.
#: Folder keys are checked once their interpolations are resolved (``check_hydra_paths``).
HYDRA_ALLOWED = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir", "hydra.output_subdir", "hydra.job.name",
                 "hydra.job.chdir", "hydra.job.config.override_dirname", "hydra.searchpath", "hydra.verbose",
                 "hydra.mode", "hydra.sweeper.params", "hydra.sweeper.max_batch_size")
#: ``hydra.launcher.*`` keys the command line may set: resources and parallelism of joblib, submitit (SLURM) and Ray,
#: and submitit's folder (checked like ``results_dir``). Refused: ``setup`` (shell lines), ``additional_parameters``,
#: ``srun_args``, ``runtime_env``, ``temp_folder`` and every key not listed.
LAUNCHER_ALLOWED = ("n_jobs", "backend", "prefer", "timeout", "verbose", "batch_size", "pre_dispatch",
                    "timeout_min", "nodes", "tasks_per_node", "cpus_per_task", "gpus_per_node", "gpus_per_task",
                    "cpus_per_gpu", "mem_gb", "mem_per_gpu", "mem_per_cpu", "partition", "qos", "comment",
                    "constraint", "exclude", "gres", "account", "array_parallelism", "name", "max_num_timeout",
                    "signal_delay_s", "stderr_to_stdout", "submitit_folder", "ray.init.address", "ray.init.num_cpus",
                    "ray.init.num_gpus", "ray.init.include_dashboard", "ray.remote.num_cpus", "ray.remote.num_gpus",
                    "ray.remote.max_calls")
#: ``hydra/<group>=option`` choices the command line may make; logging configs only from ``LOGGING_ALLOWED``.
HYDRA_GROUPS = ("launcher", "sweeper", "help", "hydra_help", "job_logging", "hydra_logging")
#: Logging configs that write no file: privbench's own (``run.log`` in the run's folder) and Hydra's console-only ones.
LOGGING_ALLOWED = ("privbench", "disabled", "none", "stdout")
#: ``hydra.*`` keys that name folders Hydra writes into: checked like ``results_dir``.
HYDRA_FOLDERS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.launcher.submitit_folder")
#: ``hydra.*`` keys that name a subfolder of those: relative, no ``..``.
HYDRA_SUBFOLDERS = ("hydra.sweep.subdir", "hydra.output_subdir")
_WHERE = "(docs/running.md lists what the command line may set)"


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def check_hydra_override(key: str, values: list[str]) -> None:
    """Refuse ``hydra.*`` overrides and ``hydra/<group>`` choices that instantiate code, run shell lines, set the
    environment, write logs or are not on the allow-lists; plain folder values are checked here, interpolated ones
    once resolved (``check_hydra_paths``).

    Example:
        >>> check_hydra_override("hydra.callbacks.x._target_", ["pathlib.Path.write_text"])
        Traceback (most recent call last):
        ...
        privbench.errors.ConfigError: hydra.callbacks.x._target_: hydra.callbacks, hydra.job_logging, hydra.hydra_logging, hydra.job.env_set and hydra.job.env_copy cannot be set from the command line (they instantiate code, set the environment or write files); choose a config option instead
    """
    if key.startswith("hydra/"):
        group = key.removeprefix("hydra/")
        if group not in HYDRA_GROUPS:
            raise ConfigError(f"{key}: not accepted from the command line; hydra groups it may choose: "
                              f"{', '.join('hydra/' + g for g in HYDRA_GROUPS)} {_WHERE}")
        bad = [v for v in values if group.endswith("_logging") and v not in LOGGING_ALLOWED]
        if bad:
            raise ConfigError(f"{key}={shown(bad[0])}: logging configs that write files are not accepted from the "
                              f"command line; allowed: {', '.join(LOGGING_ALLOWED)} {_WHERE}")
        return
    if _under(key, HYDRA_REFUSED):
        raise ConfigError(f"{key}: {', '.join(HYDRA_REFUSED[:-1])} and {HYDRA_REFUSED[-1]} cannot be set from the "
                          "command line (they instantiate code, set the environment or write files); choose a config "
                          "option instead")
    if key.split(".")[-1] == "_target_":
        raise ConfigError(f"{key}: a hydra _target_ cannot be set from the command line; choose a launcher option "
                          "(hydra/launcher=...)")
    launcher = key.removeprefix("hydra.launcher.") if key.startswith("hydra.launcher.") else None
    if launcher is not None and not _under(launcher, LAUNCHER_ALLOWED):
        raise ConfigError(f"{key}: not accepted from the command line (shell lines, environments and extra scheduler "
                          f"arguments run outside privbench's checks); launcher keys it may set: resources and "
                          f"parallelism such as n_jobs, cpus_per_task, partition {_WHERE}")
    if launcher is None and not _under(key, HYDRA_ALLOWED):
        raise ConfigError(f"{key}: not accepted from the command line; hydra keys it may set: run.dir, sweep.dir, "
                          f"sweep.subdir, output_subdir, job.name, job.chdir, searchpath, sweeper.params, launcher "
                          f"resources {_WHERE}")
    for value in (v for v in values if "${" not in v and "$\\{" not in v):  # interpolations: once resolved
        if key in HYDRA_FOLDERS:
            check_folder(key, value)
        if key in HYDRA_SUBFOLDERS:
            check_subfolder(key, value)
        if key == "hydra.job.name":
            check_job_name(value)


def check_folder(key: str, raw: Any) -> None:
    """``raw`` must name a folder privbench can create and write (``key`` names it in the error)."""
    if raw is None or not str(raw).strip():
        raise ConfigError(f"{key}: must name a folder (empty would write under the filesystem root)")
    if len(str(raw)) > 1000:
        raise ConfigError(f"{key}={shown(raw)}: too long")
    folder = Path(os.path.abspath(Path(str(raw)).expanduser()))  # '..' taken away before the checks
    existing = next((p.resolve() for p in [folder, *folder.parents] if p.exists()), None)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{key}={shown(str(raw))}: is a file, not a folder")
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK) \
            or existing.parts[1:2] in (("proc",), ("sys",), ("dev",)):
        raise ConfigError(f"{key}={shown(str(raw))}: cannot be created or written (nearest existing folder: "
                          f"{existing})")


def check_subfolder(key: str, value: Any) -> None:
    """``value`` must be a relative folder name without ``..`` (None: no such folder)."""
    if value is None:
        return
    text = str(value)
    if text.startswith(("/", "~")) or ".." in Path(text).parts:
        raise ConfigError(f"{key}={shown(text)}: must be a relative folder name without '..'")


def check_job_name(value: Any) -> None:
    """``hydra.job.name`` becomes part of file names: a plain name (no ``/``, not ``.`` or ``..``)."""
    text = str(value)
    if not text.strip() or "/" in text or "\\" in text or text in (".", "..") or len(text) > 120:
        raise ConfigError(f"hydra.job.name={shown(text)}: must be a plain name of at most 120 characters (no '/', "
                          "not '.' or '..')")


def job_folder(cfg: DictConfig, *, sweep: bool, num: int = 0) -> Path:
    """The folder Hydra will make for job ``num`` of ``cfg`` (a config from ``compose_with_hydra``): ``hydra.run.dir``,
    or in a sweep ``hydra.sweep.dir/hydra.sweep.subdir``; every interpolation resolved as Hydra resolves it."""
    dirs = _resolved(cfg, num)
    return Path(dirs["hydra.sweep.dir"]) / str(dirs["hydra.sweep.subdir"]) if sweep else Path(dirs["hydra.run.dir"])


def _resolved(cfg: DictConfig, num: int) -> dict[str, Any]:
    from omegaconf.errors import OmegaConfBaseException

    cfg = copy.deepcopy(cfg)
    with read_write(cfg.hydra.job), open_dict(cfg.hydra.job):
        cfg.hydra.job.num, cfg.hydra.job.id = num, str(num)  # what the launcher sets for each job
    out: dict[str, Any] = {}
    absent = object()
    with hydra_context(cfg):
        for key in (*HYDRA_FOLDERS, *HYDRA_SUBFOLDERS, "hydra.job.name"):
            try:
                value = OmegaConf.select(cfg, key, default=absent)
            except OmegaConfBaseException as exc:
                raise ConfigError(f"{key}: cannot be resolved before the run "
                                  f"({str(exc).strip().splitlines()[0][:200]})") from None
            if value is not absent:
                out[key] = value
    return out


def check_hydra_paths(cfg: DictConfig) -> None:
    """Every folder and name Hydra writes with, resolved first (``${oc.env:HOME}/..``, ``${results_dir}``...): the run
    and sweep folders (and submitit's) checked like ``results_dir``, subfolders relative without ``..``, the job's
    name a plain name."""
    dirs = _resolved(cfg, 0)
    for key, value in dirs.items():
        if key in HYDRA_FOLDERS and (value is not None or key != "hydra.launcher.submitit_folder"):
            check_folder(key, value)
        elif key in HYDRA_SUBFOLDERS:
            check_subfolder(key, value)
        elif key == "hydra.job.name" and value is not None:
            check_job_name(value)


@contextmanager
def hydra_context(cfg: DictConfig) -> Iterator[None]:
    """Make ``${hydra:...}`` interpolations and ``HydraConfig.get()`` see ``cfg``'s hydra node, then forget it."""
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().set_config(cfg)
    try:
        yield
    finally:
        HydraConfig.instance().cfg = None
