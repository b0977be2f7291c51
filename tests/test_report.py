"""The report from a results folder's files alone; resumable sweeps; the joblib launcher."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pandas as pd
import pytest

from privbench.report.__main__ import build_report
from privbench.report.collect import collect
from privbench.report.plots import pareto_front
from privbench.report.table import summarise, to_markdown


def _metrics(fl, payload, attack, defense, seed, psnr, acc, total, epsilon=None, extra=None):
    d = {"defense": defense}
    if defense == "dpsgd":
        d.update(noise_multiplier=1.0, max_grad_norm=1.0, epsilon=epsilon)
    if defense == "noise":
        d.update(sigma=0.01)
    return {"run": {"fl": fl, "payload": payload, "attack": attack, "defense": defense, "seed": seed,
                    "overrides": extra or []},
            "privacy": {"psnr_mean": psnr, "psnr_best": psnr, "ssim_mean": 0.5, "label_accuracy": 1.0},
            "utility": {"accuracy": acc},
            "bytes": {"uplink_bytes": total // 2, "downlink_bytes": total // 2, "total_bytes": total},
            "defense": d}


@pytest.fixture
def results(tmp_path):
    runs = [
        _metrics("genefl", "gradient", "idlg", "none", 0, 40.0, 0.80, 1000),
        _metrics("genefl", "gradient", "idlg", "none", 1, 44.0, 0.82, 1000),
        _metrics("genefl", "gradient", "idlg", "dpsgd", 0, 5.0, 0.60, 1000, epsilon=3.5),
        _metrics("genefl", "learngene", "ig", "noise", 0, None, 0.79, 600),
        _metrics("genefl", "-", "none", "none", 0, None, 0.81, 600, extra=["fl.downlink=gene", "seed=0"]),
    ]
    for i, m in enumerate(runs):
        folder = tmp_path / "sweep" / str(i)
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps(m))
        (folder / "threat_model.json").write_text(json.dumps({"payload_kind": m["run"]["payload"]}))
    (tmp_path / "sweep" / "9").mkdir()
    (tmp_path / "sweep" / "9" / "metrics.json").write_text("{not finished")  # a run being written
    return tmp_path / "sweep"


def test_rows_columns_and_missing_values(results):
    runs = collect(results)
    assert len(runs) == 5
    table = summarise(runs)
    assert len(table) == 4 and {"psnr_mean", "epsilon", "total_bytes", "accuracy", "runs", "setting"} <= set(table.columns)
    none = table[(table.defense == "none") & (table.payload == "gradient")].iloc[0]
    assert none.runs == 2 and none.psnr_mean == pytest.approx(42.0) and none.psnr_best == 44.0
    assert math.isnan(none.epsilon)  # missing, not 0
    dp = table[table.defense == "dpsgd"].iloc[0]
    assert dp.epsilon == 3.5 and dp.setting == "noise_multiplier=1.0 max_grad_norm=1.0"
    assert table[table.attack == "none"].iloc[0].variant == "fl.downlink=gene"
    md = to_markdown(table)
    assert md.count("\n") == 2 + 4 and "| – |" in md and "| 0 |" not in md


def test_pareto_front():
    t = pd.DataFrame({"psnr_mean": [10.0, 20.0, 5.0, math.nan], "accuracy": [0.8, 0.9, 0.5, 0.9],
                      "total_bytes": [100.0, 100.0, 100.0, 1.0]})
    assert pareto_front(t).tolist() == [True, True, True, False]
    t.loc[1, "psnr_mean"] = 30.0
    t.loc[1, "accuracy"] = 0.7  # now worse than row 0 on every axis
    assert pareto_front(t).tolist() == [True, False, True, False]


def test_report_files(results):
    out = build_report(results)
    for name in ("table.csv", "table.md", "runs.csv", "audit.html", "psnr_vs_epsilon.png", "psnr_vs_bytes.png",
                 "accuracy_vs_epsilon.png", "pareto.png"):
        assert (out / name).stat().st_size > 0
    html = (out / "audit.html").read_text()
    assert html.count("data:image/png;base64,") == 4 and "threat model" in html and "http" not in html.split("<body>")[1]
    assert len(pd.read_csv(out / "table.csv")) == 4


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "privbench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "HYDRA_FULL_ERROR": "0"})


SWEEP = ["fl=fedavg", "payload=gradient", "data.partition=iid", "data.num_clients=4", "data.agnostic_classes=[]",
         "fl.rounds=1", "fl.participants=2", "fl.local_epochs=1", "metrics.lpips=false", "attack.iterations=5",
         "attack.restarts=1"]


@pytest.mark.slow
def test_rerun_of_a_partly_finished_sweep_skips_exactly_the_finished_runs(tmp_path):
    args = ["-m", "seed=0,1,2", *SWEEP, f"results_dir={tmp_path}", "hydra.sweep.dir=" + str(tmp_path / "sweep")]
    first = _cli(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    done = sorted(tmp_path.glob("sweep/*/metrics.json"))
    assert len(done) == 3
    done[1].unlink()  # as if the sweep was killed during job 1
    again = _cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("skipped: the same config finished") == 2
    assert len(sorted(tmp_path.glob("sweep/*/metrics.json"))) == 3
    assert not list(tmp_path.rglob(".metrics.json.*"))  # no half-written files


@pytest.mark.slow
def test_joblib_launcher_runs_the_sweep(tmp_path):
    out = _cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1", *SWEEP, f"results_dir={tmp_path}",
               cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert sorted(json.loads(p.read_text())["run"]["seed"] for p in tmp_path.rglob("metrics.json")) == [0, 1]


def test_a_second_attack_on_the_same_training_attacks_its_recorded_payloads(compose_cfg, tmp_path):
    """Train once per setting and seed: another attack on the same training reads the recorded store."""
    from privbench.audit.run import run_audit

    base = [*SWEEP, "attack.iterations=20", f"results_dir={tmp_path}"]
    first = run_audit(compose_cfg(*base, "attack=idlg"), tmp_path / "a")
    second = run_audit(compose_cfg(*base, "attack=dlg"), tmp_path / "b")
    assert second["run"]["trained_in"] == str(tmp_path / "a") and "trained_in" not in first["run"]
    assert not (tmp_path / "b" / "payloads").exists() and second["timing"]["train_s"] == 0.0
    fresh = run_audit(compose_cfg(*base, "attack=dlg", "resume=false"), tmp_path / "c")
    assert "trained_in" not in fresh["run"] and (tmp_path / "c" / "payloads").exists()
    assert fresh["privacy"]["psnr_mean"] == second["privacy"]["psnr_mean"]  # same numbers as training again
    assert fresh["utility"] == second["utility"] and fresh["defense"] == second["defense"]


def test_summary_gives_95_percent_t_intervals_and_the_leak_verdict():
    runs = pd.DataFrame({"fl": "genefl", "payload": ["gradient"] * 3 + ["learngene"] * 2 + ["update"],
                         "attack": "idlg", "defense": "none", "setting": "-", "variant": "-", "seed": [0, 1, 2, 0, 1, 0],
                         "psnr_mean": [40.0, 44.0, 42.0, 9.0, 11.0, 8.0], "psnr_gain": [31.0, 35.0, 33.0, -1.0, 3.0, -2.0],
                         "run_dir": "x"})
    table = summarise(runs).set_index("payload")
    # by hand: mean 42, sd 2, n 3 -> 42 +- t(0.975, 2) * 2 / sqrt(3), t = 4.302653
    half = 4.302653 * 2 / math.sqrt(3)
    assert table.loc["gradient", "psnr_mean_lo"] == pytest.approx(42 - half, rel=1e-5)
    assert table.loc["gradient", "psnr_mean_hi"] == pytest.approx(42 + half, rel=1e-5)
    assert table.loc["gradient", "leaks"] == "yes" and table.loc["learngene", "leaks"] == "unclear"
    assert table.loc["update", "leaks"] == "-" and math.isnan(table.loc["update", "psnr_mean_lo"])  # one seed
    md = to_markdown(summarise(runs))
    assert f"42 [{42 - half:.3g}, {42 + half:.3g}]" in md and "psnr_mean_lo" not in md
