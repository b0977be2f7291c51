"""The ``python -m privbench`` Hydra app: compose the config, run one audit per job."""
from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from privbench.errors import PrivbenchError
from privbench.figures import PSNR_MEAN

#: What Hydra itself writes into a job folder; a skipped job's folder holding only these is removed.
HYDRA_FILES = {".hydra", "run.log"}
#: Hydra's options that load files outside privbench's checks: the rerun unpickles its file; the others replace
#: privbench's config tree (``--config-dir`` and ``hydra.searchpath`` add to it, and are checked).
REFUSED_OPTIONS = ("--experimental-rerun", "--config-path", "-cp", "--config-name", "-cn")
#: In a sweep, a skipped job's folder keeps only this pointer to the run that finished the same config.
RESUMED = "resumed.json"


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
    shutil.rmtree(out, ignore_errors=True)
    if sweep:
        done = finished(finished_runs(results), metrics.get("run", {}).get("config_key", ""))
        if done is not None:
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(out / RESUMED, json.dumps({"finished_in": str(done.resolve())}) + "\n")


@hydra.main(config_path="pkg://privbench.conf", config_name="config", version_base="1.3")
def app(cfg: DictConfig) -> float | None:
    """Run one audit; bad input ends with one ``privbench: error:`` line and exit status 2."""
    from privbench.audit.run import run_audit

    hydra_cfg = HydraConfig.get()
    jobs = parallel_jobs(hydra_cfg)
    set_threads(jobs)
    if jobs > 1:  # a joblib worker: stop when the sweep that started it is killed
        watch_parent()
    out = Path(hydra_cfg.runtime.output_dir)
    try:
        metrics = run_audit(cfg, out, jobs=jobs)
    except PrivbenchError as exc:
        print(f"privbench: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if not (out / "metrics.json").exists():
        from hydra.types import RunMode

        _after_skip(out, metrics, results=Path(str(cfg.results_dir)), sweep=hydra_cfg.mode == RunMode.MULTIRUN)
    return metrics["privacy"].get(PSNR_MEAN.key)



def main() -> None:
    """Console entry point: check the overrides, then hand over to Hydra."""
    from privbench.naming import register
    from privbench.overrides import check_overrides

    register()
    os.environ[SWEEP_PID] = str(os.getpid())  # joblib workers inherit it (``watch_parent``)

    refused = next((a for a in sys.argv[1:] if a.split("=", 1)[0] in REFUSED_OPTIONS), None)
    if refused is not None:
        print(f"privbench: error: {refused.split('=', 1)[0]}: not accepted (it loads a config or a pickled job from a "
              "file outside privbench's checks); add configs through hydra.searchpath or --config-dir",
              file=sys.stderr)
        raise SystemExit(2)
    args = [a for a in sys.argv[1:] if not a.startswith("-") and "=" in a]
    if not any(a in ("--help", "-h", "--hydra-help", "--info", "-i") for a in sys.argv[1:]):
        try:
            check_overrides(args)
        except PrivbenchError as exc:
            print(f"privbench: error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    app()


if __name__ == "__main__":
    main()
