"""Issue 45 items 1, 4, 5 and 8: options refused by meaning, finished runs never written over or counted twice, no
folder removed that privbench did not create, every sweep job's plan checked before job 0."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from privbench import cli
from privbench.audit.resume import RUNNING, config_lock
from privbench.errors import ConfigError, PrivbenchError
from privbench.io import claim
from privbench.launch import EXISTED, check_launch, hydra_arguments, protected, remember
from privbench.overrides import check_overrides
from privbench.report.collect import collect

#: Any spelling Hydra's parser takes for a refused option (unique prefixes, ``=``, attached short values).
ABBREVIATIONS = [["--exp", "f.pickle"], ["--experimental-r=f.pickle"], ["--config-p", "/tmp", "--config-n", "evil"],
                 ["--config-na=evil"], ["-cn=evil"], ["-cp", "/tmp"], ["seed=1", "--experimental-rer", "f"]]


@pytest.mark.parametrize("argv", ABBREVIATIONS, ids=[" ".join(a) for a in ABBREVIATIONS])
def test_a_refused_option_is_refused_under_any_spelling_hydra_accepts(argv):
    with pytest.raises(ConfigError) as info:
        hydra_arguments(argv)
    assert "not accepted" in str(info.value) and "--" in str(info.value)


def test_an_ambiguous_prefix_is_one_line_and_accepted_options_pass():
    with pytest.raises(ConfigError, match="ambiguous option: --con"):
        hydra_arguments(["--con", "x"])
    args = hydra_arguments(["-m", "--config-dir", "conf", "seed=0,1", "~attack"])
    assert args.multirun and args.config_dir == "conf" and args.overrides == ["seed=0,1", "~attack"]


HONEST_HYDRA = [["hydra.run.dir=${results_dir}/mine"], ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
                ["hydra/job_logging=stdout"], ["hydra.sweep.dir=${oc.env:HOME}/pb-sweeps"], ["hydra.job.chdir=false"],
                ["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.cpus_per_task=2"],
                ["experiment=dp_curve"]]


@pytest.mark.parametrize("overrides", HONEST_HYDRA, ids=[" ".join(a)[:50] for a in HONEST_HYDRA])
def test_allowed_hydra_keys_still_pass(overrides):
    check_overrides(overrides)


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_every_sweep_value_is_planned_before_job_0(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for overrides, names in [(["attack=none,source"], "job 2/2 (attack=source): attack=source"),
                             (["victim.num_images=1,100"], "job 2/2 (victim.num_images=100)"),
                             (["data.num_clients=5", "victim.client=0,5"], "job 2/2 (data.num_clients=5 victim.client=5)"),
                             (["fl=fedavg", "payload=global_model", "attack=participation", "fl.rounds=1",
                               "capture.rounds=all", "capture.clients=all", "seed=0,1"], "fl.rounds >= 2")]:
        with pytest.raises(PrivbenchError) as info:
            check_launch(overrides, multirun=True)
        assert names in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert check_launch(["seed=0,1"], multirun=True)  # the honest sweep passes
    assert not list(tmp_path.rglob("*")), "planning wrote nothing"


def _finished(folder, overrides, key="k0"):
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"run": {"overrides": overrides, "config_key": key, "seed": 0}}))


@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_a_folder_holding_a_finished_run_of_other_overrides_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _finished(tmp_path / "run", ["seed=0"])
    with pytest.raises(ConfigError, match="holds a finished run of other overrides"):
        check_launch([f"hydra.run.dir={tmp_path / 'run'}", "seed=1"], multirun=False)
    check_launch([f"hydra.run.dir={tmp_path / 'run'}", "seed=0"], multirun=False)  # the same run: resumed
    _finished(tmp_path / "sweep" / "0", ["seed=0"])
    _finished(tmp_path / "sweep" / "1", ["seed=1"])
    with pytest.raises(ConfigError, match="sweep/0 holds a finished run"):  # a second sweep, seeds 2-3
        check_launch([f"hydra.sweep.dir={tmp_path / 'sweep'}", "seed=2,3"], multirun=True)
    check_launch([f"hydra.sweep.dir={tmp_path / 'sweep'}", "seed=0,1"], multirun=True)  # the same sweep again


def test_a_run_never_claims_a_finished_folder(tmp_path):
    _finished(tmp_path / "run", ["seed=0"])
    got = claim(tmp_path / "run")
    assert got == tmp_path / "run-2" and json.loads((tmp_path / "run" / "metrics.json").read_text())


def test_a_folder_that_existed_before_the_launch_is_never_removed(tmp_path, monkeypatch):
    monkeypatch.setenv(EXISTED, "")
    here = tmp_path / "cwd"
    (here / ".hydra").mkdir(parents=True)
    (here / ".hydra" / "config.yaml").write_text("x: 1\n")
    (here / "run.log").write_text("earlier lines\n")
    monkeypatch.chdir(here)  # hydra.run.dir=. on a skipped run
    assert protected(here) and protected(tmp_path) and not cli._remove_hydra_files(here)
    assert here.is_dir() and not (here / ".hydra").exists() and (here / "run.log").read_text() == "earlier lines\n"
    mine = tmp_path / "existing"
    mine.mkdir()
    remember([mine])
    assert os.environ[EXISTED] == str(mine) and protected(mine) and not protected(mine / "new")
    (mine / "new" / ".hydra").mkdir(parents=True)
    cli._after_refusal(mine / "new", "privbench: error: x", single=True)
    assert not (mine / "new").exists() and mine.is_dir()  # Hydra's new folder goes, the one that existed stays


@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_an_identical_run_waits_for_the_one_running(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    threading.Thread(target=holder.wait, daemon=True).start()  # reaped when it ends, as another parent's would be
    (tmp_path / RUNNING).mkdir()
    (tmp_path / RUNNING / "k.lock").write_text(f"{holder.pid}\n")
    start = time.perf_counter()
    with config_lock(tmp_path, "k", poll=0.1):
        waited = time.perf_counter() - start
        assert (tmp_path / RUNNING / "k.lock").read_text().strip() == str(os.getpid())
    assert waited > 0.5 and not (tmp_path / RUNNING).exists()
    (tmp_path / RUNNING).mkdir()
    (tmp_path / RUNNING / "k.lock").write_text(f"{holder.pid}\n")  # left by a process that is gone
    start = time.perf_counter()
    with config_lock(tmp_path, "k", poll=0.1):
        assert time.perf_counter() - start < 0.5


def test_the_report_counts_a_config_and_seed_once_by_its_newest_run(tmp_path):
    """A config and seed finished twice (a rerun with resume=false) is counted once, by the run written last
    (whatever its folder's name), the other listed."""
    _finished(tmp_path / "b", ["seed=0"], key="same")
    _finished(tmp_path / "a", ["seed=0"], key="same")
    _finished(tmp_path / "c", ["seed=1"], key="other")
    os.utime(tmp_path / "b" / "metrics.json", (1_000_000, 1_000_000))  # b finished long before a
    runs = collect(tmp_path)
    assert list(runs["run_dir"].astype(str)) == ["a", "c"] and runs.attrs["duplicates"] == ["b/metrics.json"]
    os.utime(tmp_path / "a" / "metrics.json", (500_000, 500_000))  # now a is the older one
    runs = collect(tmp_path)
    assert list(runs["run_dir"].astype(str)) == ["b", "c"] and runs.attrs["duplicates"] == ["a/metrics.json"]
