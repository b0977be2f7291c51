"""Sweeps beyond one machine: the SLURM (submitit) and Ray launcher configs compose, and run where they can."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

TINY = ["fl=fedavg", "payload=gradient", "fl.rounds=1", "fl.participants=2", "data.num_clients=4",
        "data.partition=iid", "fl.local_epochs=1", "attack=none"]


def _hydra(*overrides: str):
    with initialize_config_module(config_module="privbench.conf", version_base=None):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


def test_the_slurm_launcher_composes_with_threads_matching_its_cores():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    cfg = _hydra("hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.cpus_per_task=8")
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert launcher.partition == "gpu" and launcher.timeout_min == 120
    assert list(launcher.setup) == ["export OMP_NUM_THREADS=8"]


def test_the_ray_launcher_composes():
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    cfg = _hydra("hydra/launcher=ray_cluster", "hydra.launcher.ray.init.address=auto")
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"] == "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"
    assert launcher["ray"]["init"]["address"] == "auto" and launcher["ray"]["remote"]["num_cpus"] == 1


def _sweep(tmp_path: Path, launcher: list[str], name: str, seeds: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "privbench", "-m", f"seed={seeds}", *TINY, *launcher, f"results_dir={tmp_path}",
            f"hydra.sweep.dir={tmp_path / name}"]
    return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_submitit_sweep_runs_and_resumes(tmp_path):
    # submitit's local executor pickles each run and starts it in its own process, as on SLURM
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    local = ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10", "hydra.launcher.cpus_per_task=1"]
    out = _sweep(tmp_path, local, "first", "0,1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(list((tmp_path / "first").rglob("metrics.json"))) == 2
    again = _sweep(tmp_path, local, "second", "0,1,2")
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(list((tmp_path / "second").rglob("resumed.json"))) == 2  # the finished runs are skipped
    assert len(list((tmp_path / "second").rglob("metrics.json"))) == 1


@pytest.mark.slow
def test_a_ray_sweep_runs_on_this_machine(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    ray = ["hydra/launcher=ray_cluster", "hydra.launcher.ray.init.num_cpus=2"]
    out = _sweep(tmp_path, ray, "first", "0,1")
    assert out.returncode == 0, out.stderr[-2000:]
    metrics = sorted((tmp_path / "first").rglob("metrics.json"))
    assert len(metrics) == 2
