"""The ``python -m privbench`` Hydra app: compose the config, run one audit per job."""
from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from privbench.errors import PrivbenchError
from privbench.figures import PSNR_MEAN

#: What Hydra itself writes into a job folder; a skipped job's folder holding only these is removed.
HYDRA_FILES = {".hydra", "run.log"}
#: In a sweep, a skipped job's folder keeps only this pointer to the run that finished the same config.
RESUMED = "resumed.json"
#: A refused run's folder that holds more than Hydra's files keeps its one-line error here.
ERROR = "error.txt"


def parallel_jobs(hydra_cfg: Any) -> int:
    """How many jobs run at once under this launcher (joblib's ``n_jobs``; 1 for the basic launcher)."""
    launcher = hydra_cfg.get("launcher") or {}
    if "joblib" not in str(launcher.get("_target_", "")).lower():
        return 1
    n = int(launcher.get("n_jobs") or 1)
    cores = os.cpu_count() or 1
    return cores if n < 0 else max(1, n)


def set_threads(jobs: int) -> int:
    """Give torch ``cores // jobs`` threads (at least 1), unless ``OMP_NUM_THREADS`` says otherwise.

    Torch's thread pool spins when processes x threads exceed the cores (a 56 s audit took
    41 minutes beside three others), so parallel jobs share the cores out while the config loads;
    the audit then chooses its own count (``threads=auto``, ``privbench.device.choose_threads``).
    """
    import torch

    from privbench.device import SMALL_STEP_MACS, choose_threads

    # the model is not known yet: its share of the cores, as for a large one
    threads = choose_threads("auto", step_macs=SMALL_STEP_MACS, device=torch.device("cpu"), jobs=jobs).count
    torch.set_num_threads(threads)
    return threads


#: The sweep's own process id, handed to its joblib workers through the environment.
SWEEP_PID = "PRIVBENCH_SWEEP_PID"


def watch_parent() -> None:
    """Exit this worker process when the sweep that started it dies (a killed joblib sweep).

    The sweep's pid comes from the environment it started the worker with, so a sweep killed before this
    worker reached its job (the worker already re-parented) is noticed too.
    """
    from privbench.io import alive

    recorded = os.environ.get(SWEEP_PID, "")
    parent = int(recorded) if recorded.isdigit() else os.getppid()

    def watch() -> None:
        while True:
            if not alive(parent):
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, name="privbench-parent-watch", daemon=True).start()


def _after_skip(out: Path, metrics: dict[str, Any], *, results: Path, sweep: bool) -> None:
    """A skipped job leaves no empty folder: in a sweep one ``resumed.json`` pointer (the sweep's report
    follows it), otherwise nothing."""
    from privbench.audit.resume import finished, finished_runs
    from privbench.io import atomic_write_text

    if not out.is_dir() or (out / "metrics.json").exists() or not {p.name for p in out.iterdir()} <= HYDRA_FILES:
        return
    if not _remove_hydra_files(out):
        return
    if sweep:
        run = metrics.get("run", {})
        done = finished(finished_runs(results), run.get("config_key", ""))
        if done is not None:
            out.mkdir(parents=True, exist_ok=True)
            pointer = {"finished_in": str(done.resolve()), "overrides": _task_overrides()}
            atomic_write_text(out / RESUMED, json.dumps(pointer) + "\n")


def _task_overrides() -> list[str]:
    """This job's task overrides (what a later launch into its folder is compared with)."""
    return [str(o) for o in HydraConfig.get().overrides.task]


def _remove_hydra_files(out: Path) -> bool:
    """Remove what Hydra wrote into ``out`` for this job (``.hydra/``, ``run.log``) and ``out`` itself, unless it, or a
    folder below it, existed before the launch or holds the working directory (``privbench.launch.protected``); then
    the files Hydra wrote over in ``.hydra/`` alone go (``run.log`` may hold earlier lines). Returns whether ``out`` is
    gone."""
    from privbench.launch import protected

    if protected(out):
        for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
            (out / ".hydra" / name).unlink(missing_ok=True)
        try:
            (out / ".hydra").rmdir()
        except OSError:
            pass
        return False
    shutil.rmtree(out, ignore_errors=True)
    return True


def _after_refusal(out: Path, line: str, *, single: bool) -> None:
    """A refused run leaves nothing behind: its folder goes when it holds only what Hydra wrote there (``.hydra/``,
    ``run.log``), and in a single run its ``results/<name>/`` folder too when that is left empty; a folder holding
    anything else keeps it and gets ``error.txt`` with the error (unless it has one, or another running audit holds
    it). A folder holding a finished run (``metrics.json``, a sweep's ``resumed.json``) is never touched: the run
    claimed another folder (``privbench.io.claim``), where its refusal is recorded, or none."""
    from privbench.io import FINISHED, LOCK, alive, atomic_write_text

    if not out.is_dir() or any((out / name).exists() for name in FINISHED):
        return  # a finished run's folder (a rerun claimed ``<folder>-2``, which has its error.txt): left as it is
    names = {p.name for p in out.iterdir()}
    if names <= HYDRA_FILES:
        from privbench.launch import protected

        if _remove_hydra_files(out) and single and not protected(out.parent):
            try:
                out.parent.rmdir()  # only when empty: the refused run was its only one
            except OSError:
                pass
        return
    if ERROR in names:
        return
    try:
        holder = int((out / LOCK).read_text().strip() or 0) if LOCK in names else 0
    except (OSError, ValueError):
        holder = 0
    if holder and holder != os.getpid() and alive(holder):
        return  # another running audit's folder (same name and second): not this run's to mark
    atomic_write_text(out / ERROR, line + "\n")


@lru_cache(maxsize=8)
def sweep_size(sweep_dir: str) -> int | None:
    """Jobs in the sweep whose folder is ``sweep_dir``: the product of its swept values (``hydra.sweeper.params``
    and the command line's, as Hydra's basic sweeper expands them; read from the sweep's ``multirun.yaml``); None
    when it cannot be told (another sweeper, no such file)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    try:
        saved = OmegaConf.to_container(OmegaConf.load(Path(sweep_dir) / "multirun.yaml").hydra, resolve=False)
        assert isinstance(saved, dict)
        sweeper = saved.get("sweeper") or {}
        if not str(sweeper.get("_target_", "")).endswith(".BasicSweeper"):
            return None
        args = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
        args += [str(a) for a in (saved.get("overrides") or {}).get("task") or []]
        loader = GlobalHydra.instance().config_loader() if GlobalHydra.instance().is_initialized() else None
        batches = BasicSweeper.split_arguments(OverridesParser.create(config_loader=loader).parse_overrides(args),
                                               None)
        return sum(len(batch) for batch in batches)
    except Exception:  # noqa: BLE001 - the count is a courtesy; the job runs without it
        return None


def job_line(hydra_cfg: Any) -> str:
    """``job k/N: overrides`` for a sweep's job (``k`` from 1; ``job k:`` when the sweep's size is unknown)."""
    num = int(hydra_cfg.job.get("num") or 0) + 1
    total = sweep_size(str(hydra_cfg.sweep.dir))
    overrides = " ".join(str(o) for o in hydra_cfg.overrides.task)
    return f"job {num}/{total}: {overrides}" if total else f"job {num}: {overrides}"


@hydra.main(config_path="pkg://privbench.conf", config_name="config", version_base="1.3")
def app(cfg: DictConfig) -> float | None:
    """Run one audit; bad input ends with one ``privbench: error:`` line and exit status 2.

    A sweep's job first says which job of how many it is. Python warnings go to the log while the audit runs (to
    run.log; on the console only what ``privbench.progress.OwnLines`` lets through), and third-party loggers' own
    console handlers (Flower's) are detached so their lines take the same way.
    """
    from hydra.types import RunMode

    from privbench.audit.run import run_audit
    from privbench.progress import log, quiet_consoles

    hydra_cfg = HydraConfig.get()
    sweep = hydra_cfg.mode == RunMode.MULTIRUN
    if sweep:
        log.info("%s", job_line(hydra_cfg))
    jobs = parallel_jobs(hydra_cfg)
    set_threads(jobs)
    if jobs > 1:  # a joblib worker: stop when the sweep that started it is killed
        watch_parent()
    out = Path(hydra_cfg.runtime.output_dir)
    logging.captureWarnings(True)
    try:
        with quiet_consoles():
            metrics = run_audit(cfg, out, jobs=jobs)
    except PrivbenchError as exc:
        line = f"privbench: error: {exc}"
        _after_refusal(out, line, single=not sweep)
        print(line, file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        logging.captureWarnings(False)
    if not (out / "metrics.json").exists():
        _after_skip(out, metrics, results=Path(str(cfg.results_dir)), sweep=sweep)
    return metrics["privacy"].get(PSNR_MEAN.key)



def main() -> None:
    """Console entry point: check the overrides, then hand over to Hydra (``audit-app PATH``: audit a Flower app,
    ``privbench.app_audit``)."""
    if sys.argv[1:2] == ["audit-app"]:
        from privbench.app_audit.command import main as audit_app

        raise SystemExit(audit_app(sys.argv[2:]))
    from privbench.config_dir import use_config_dir
    from privbench.launch import check_launch, hydra_arguments, remember
    from privbench.naming import register
    from privbench.overrides import check_overrides
    from privbench.studies import register_studies

    register()
    register_studies()
    os.environ[SWEEP_PID] = str(os.getpid())  # joblib workers inherit it (``watch_parent``)

    try:
        args = hydra_arguments(sys.argv[1:])
        use_config_dir(args.config_dir)  # the checks compose with it, as Hydra will
        # --help and --hydra-help compose with logging configured from the overrides (hydra.hydra_logging): checked
        # too; --info composes without logging, callbacks or launcher and only prints the config
        if not args.info:
            check_overrides(list(args.overrides))
        if not (args.help or args.hydra_help or args.info or args.cfg or args.shell_completion):
            remember(check_launch(list(args.overrides), multirun=bool(args.multirun)))
    except PrivbenchError as exc:
        print(f"privbench: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    app()


if __name__ == "__main__":
    main()
