"""The report from a results folder's files alone; resumable sweeps; the joblib launcher."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from privbench.report.__main__ import build_report
from privbench.report.collect import collect
from privbench.report.pareto import pareto_front
from privbench.report.table import summarise, to_markdown


def _run(payload, attack, defense, seed, psnr, acc, total, *, epsilon=None, width=12, chance=9.0):
    """A finished run's ``metrics.json`` and resolved ``config.yaml`` as the audit writes them."""
    d = {"defense": defense}
    config = {"seed": seed, "name": "x", "results_dir": "r", "model": {"_target_": "LeNet", "width": width},
              "fl": {"_target_": "GeneFL", "rounds": 10}, "payload": {"kind": payload},
              "attack": {"_target_": attack, "iterations": 300}, "defense": {"_target_": defense}}
    if defense == "dpsgd":
        d.update(epsilon=epsilon)
        config["defense"].update(target_epsilon=epsilon, max_grad_norm=1.0, cover=[])
    training = f"{defense}-{epsilon}-{width}-{seed}"
    metrics = {"run": {"fl": "genefl", "payload": payload, "attack": attack, "defense": defense, "seed": seed,
                       "model": "lenet", "data": "fashion_mnist_subset", "training_key": training},
               "privacy": {"psnr_mean": psnr, "psnr_best": psnr, "psnr_chance": chance,
                           "psnr_gain": None if psnr is None else psnr - chance, "ssim_mean": 0.5,
                           "label_accuracy": 1.0},
               "utility": {"accuracy": acc},
               "bytes": {"uplink_bytes": total // 2, "downlink_bytes": total - total // 2, "total_bytes": total},
               "defense": d}
    return metrics, config


def write_runs(root):
    """Synthetic results: no defence and DP-SGD at three epsilons (2 seeds, two attacks), one wider model, a
    run without leakage figures, a run being written and a foreign ``metrics.json``."""
    specs = []
    for seed in (0, 1):
        for attack, bonus in (("idlg", 0.0), ("ig", -5.0)):
            specs.append(_run("gradient", attack, "none", seed, 40.0 + 4 * seed + bonus, 0.80 + 0.02 * seed, 1000))
            for eps, psnr in ((1.0, 5.0), (8.0, 9.0), (64.0, 20.0)):
                specs.append(_run("gradient", attack, "dpsgd", seed, psnr + seed + bonus, 0.5 + eps / 200, 1000,
                                  epsilon=eps))
    specs.append(_run("gradient", "idlg", "none", 0, 30.0, 0.9, 4000, width=24))
    specs.append(_run("gradient", "idlg", "none", 1, 31.0, 0.9, 4000, width=24))
    rng = np.random.default_rng(0)
    for i, (metrics, config) in enumerate(specs):
        folder = root / f"run{i}"
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps(metrics))
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        (folder / "threat_model.json").write_text(json.dumps({"payload_kind": metrics["run"]["payload"]}))
        images = rng.integers(0, 256, (3, 2, 28, 28, 1), dtype=np.uint8)
        np.savez_compressed(folder / "gallery.npz", truth=images[0], recon=images[1], chance=images[2],
                            psnr=np.array([31.5, 12.0]), chance_psnr=np.array([9.1, 8.7]),
                            true_label=np.array([3, 4]), recon_label=np.array([3, 5]))
    (root / "writing").mkdir()
    (root / "writing" / "metrics.json").write_text("{not finished")  # a run being written
    (root / "foreign").mkdir()
    (root / "foreign" / "metrics.json").write_text("null")  # a foreign file
    return root


@pytest.fixture
def results(tmp_path):
    return write_runs(tmp_path / "sweep")


def test_rows_group_by_every_differing_config_value(results):
    runs = collect(results)
    assert len(runs) == 2 * 2 * 4 + 2 and "defense.target_epsilon" in runs and "model.width" in runs
    table = summarise(runs)
    assert table.attrs["keys"] == ["attack", "defense", "defense.target_epsilon", "model.width"]
    assert len(table) == 2 * 4 + 1 and set(table["runs"]) == {2}
    none = table[(table.defense == "none") & (table.attack == "idlg") & (table["model.width"] == 12)].iloc[0]
    assert none.psnr_mean == pytest.approx(42.0) and none.psnr_best == 44.0 and none.psnr_gain == pytest.approx(33.0)
    assert math.isnan(none.epsilon) and math.isnan(none["defense.target_epsilon"])  # missing, not 0
    wide = table[table["model.width"] == 24].iloc[0]
    assert wide.psnr_mean == pytest.approx(30.5) and wide.total_bytes == 4000  # not averaged with width 12
    md = to_markdown(table)
    assert "`model.width`" in md.splitlines()[0] and "| attack | defense | defense.target_epsilon | model.width | n |" in md
    assert md.count("\n| ") == 1 + len(table) and "| - |" in md and "| 0 |" not in md


def test_utility_counts_each_training_once(results):
    from privbench.report.plots import one_per_training

    runs = collect(results)
    keys = summarise(runs).attrs["keys"]
    once = one_per_training(runs, keys)  # idlg and ig attacked the same trainings
    trainings = once[["defense", "defense.target_epsilon", "model.width", "seed"]].astype(str)
    assert len(once) == 2 * 4 + 2 and not trainings.duplicated().any()


def test_markdown_escapes_html_pipes_and_dollars():
    runs = pd.DataFrame({"payload": ["<b>x</b>", "<b>x</b>", "a|b"], "attack": ["$x$", "y", "y"], "defense": "none", "fl": "f", "model": "m",
                         "data": "d", "seed": 0, "psnr_mean": 1.0, "psnr_gain": 0.5, "run_dir": "x"})
    md = to_markdown(summarise(runs))
    assert "&lt;b&gt;x&lt;/b&gt;" in md and "a\\|b" in md and "\\$x\\$" in md and "<b>" not in md


def test_pareto_front():
    t = pd.DataFrame({"psnr_gain": [10.0, 20.0, 5.0, math.nan], "accuracy": [0.8, 0.9, 0.5, 0.9],
                      "total_bytes": [100.0, 100.0, 100.0, 1.0]})
    assert pareto_front(t).tolist() == [True, True, True, False]
    t.loc[1, "psnr_gain"] = 30.0
    t.loc[1, "accuracy"] = 0.7  # now worse than row 0 on every axis
    assert pareto_front(t).tolist() == [True, False, True, False]


@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_report_files(results):
    out = build_report(results)
    for name in ("table.csv", "table.md", "paired.md", "runs.csv", "audit.html", "gallery.html", "pareto.png", "bytes.png",
                 "leakage_vs_defense_target_epsilon.png", "utility_vs_defense_target_epsilon.png"):
        assert (out / name).stat().st_size > 0, name
    page = (out / "audit.html").read_text()
    assert page.count("data:image/png;base64,") == 4 and "gallery.html" in page and "http" not in page.split("<body>")[1]
    assert "class='scroll'" in page and "defense.target_epsilon" in page
    assert "<h2>Paired differences</h2>" in page and "| defense.target_epsilon |" in (out / "paired.md").read_text()
    gallery = (out / "gallery.html").read_text()
    # 9 settings with a reconstruction, 2 pairs each: truth, rebuilt and chance images with PSNR and labels
    assert gallery.count("<section>") == 9 and gallery.count('alt="chance baseline"') == 18
    assert "rebuilt 31.5 dB<br>label 3 (right)" in gallery and "chance 9.1 dB" in gallery and "label 5 (wrong)" in gallery
    assert len(pd.read_csv(out / "table.csv")) == 9


def test_the_gallery_shows_the_recovered_pairs_first_and_every_pair_on_demand(tmp_path):
    from privbench.report.gallery import setting_html

    images = np.random.default_rng(0).integers(0, 256, (3, 6, 4, 4, 1), dtype=np.uint8)
    psnr = np.array([12.0, 31.5, 26.0, 9.0, 30.0, 27.0])  # by hand: 31.5, 30, 27, 26 recovered (>= 25), then 12, 9
    np.savez(tmp_path / "gallery.npz", truth=images[0], recon=images[1], chance=images[2], psnr=psnr,
             chance_psnr=np.full(6, 8.0), true_label=np.arange(6), recon_label=np.arange(6))
    text = setting_html(tmp_path, "s", "summary", bar=25.0)
    shown, hidden = text.split("<details>", 1)
    assert [float(v) for v in re.findall(r"rebuilt ([\d.]+) dB", shown)] == [31.5, 30.0, 27.0, 26.0]
    assert shown.count("class='pair recovered'") == 4 and "4 of 6 pairs rebuilt to 25 dB" in shown
    assert "the other 2 pairs" in hidden and [float(v) for v in re.findall(r"rebuilt ([\d.]+) dB", hidden)] == [
        12.0, 9.0]
    few = setting_html(tmp_path, "s", "summary", bar=40.0)  # none recovered: the best 4 first, the rest on demand
    assert few.split("<details>", 1)[0].count("class='pair'") == 4 and few.count('alt="reconstruction"') == 6


def test_a_cohort_sized_setting_embeds_its_recovered_pairs_and_the_best_of_the_rest(tmp_path, monkeypatch):
    """With the cap at 3, 2 recovered of 8: both recovered pairs first, the next 3 by PSNR behind the click, and the
    3 lowest named as not embedded."""
    from privbench.report import gallery

    monkeypatch.setattr(gallery, "HIDDEN", 3)
    monkeypatch.setattr(gallery, "PAIRS", 2)
    images = np.random.default_rng(1).integers(0, 256, (3, 8, 4, 4, 1), dtype=np.uint8)
    psnr = np.array([5.0, 30.0, 11.0, 9.0, 28.0, 7.0, 13.0, 6.0])
    np.savez(tmp_path / "gallery.npz", truth=images[0], recon=images[1], chance=images[2], psnr=psnr,
             chance_psnr=np.full(8, 4.0), true_label=np.arange(8), recon_label=np.arange(8))
    shown, hidden = gallery.setting_html(tmp_path, "s", "summary", bar=25.0).split("<details>", 1)
    assert [float(v) for v in re.findall(r"rebuilt ([\d.]+) dB", shown)] == [30.0, 28.0]
    assert [float(v) for v in re.findall(r"rebuilt ([\d.]+) dB", hidden)] == [13.0, 11.0, 9.0]
    assert "the other 6 pairs; the 3 with the lowest PSNR are not embedded" in hidden


def test_gallery_file_pairs_each_truth_with_its_reconstruction_and_chance_image(tmp_path):
    from privbench.audit.output import write_gallery
    from privbench.metrics.image import psnr

    g = torch.Generator().manual_seed(0)
    truth, recon, chance = (torch.rand(3, 1, 8, 8, generator=g) for _ in range(3))
    pairs = [{"recon": 0, "truth": 2, "psnr": 21.0, "ssim": 0.5}, {"recon": 1, "truth": 0, "psnr": 12.0, "ssim": 0.9}]
    chance_pairs = [{"recon": 2, "truth": 2}, {"recon": 0, "truth": 1}]
    write_gallery(tmp_path / "g.npz", truth=truth, recon=recon, truth_labels=torch.tensor([7, 8, 9]),
                  recon_labels=torch.tensor([9, 1]), pairs=pairs[::-1], chance=chance, chance_pairs=chance_pairs)
    with np.load(tmp_path / "g.npz") as saved:  # best PSNR first, whatever the order given
        assert saved["truth"].shape == (2, 8, 8, 1) and saved["truth"].dtype == np.uint8
        assert np.array_equal(saved["truth"][0], (truth[2].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8))
        assert saved["true_label"].tolist() == [9, 7] and saved["recon_label"].tolist() == [9, 1]
        assert saved["ssim"].tolist() == [0.5, 0.9] and saved["recovered"].tolist() == [True, False]  # 20 dB bar
        # truth 2 has its own chance match (chance image 2); truth 0 has none and takes the image at its position
        assert saved["chance_psnr"][0] == pytest.approx(psnr(chance[2], truth[2]))
        assert saved["chance_psnr"][1] == pytest.approx(psnr(chance[1], truth[0]))


def test_multirun_ends_with_one_table_of_its_settings(results):
    from privbench.audit.sweep_summary import combined_table

    text = combined_table(results).splitlines()
    assert text[0].startswith("18 finished runs") and text[1].split()[:5] == ["attack", "defense", "target_epsilon",
                                                                              "width", "n"]
    assert len(text) == 2 + 9 and max(map(len, text[1:])) <= 80
    row = next(line for line in text if line.startswith("idlg") and "none" in line and " 12 " in line).split()
    assert row[row.index("none") + 1:row.index("none") + 6] == ["-", "12", "2", "42.00", "+33.00"]


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
    table = out.stdout[out.stdout.index("2 finished runs in"):].splitlines()  # the multirun's combined table
    assert table[1].split()[:3] == ["n", "PSNR", "gain"] and table[2].split()[0] == "2"
    assert table[3].startswith("report: python -m privbench.report")


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_a_second_attack_on_the_same_training_attacks_its_recorded_payloads(compose_cfg, tmp_path):
    """Train once per setting and seed: another attack on the same training reads the recorded store."""
    from privbench.audit.run import run_audit

    base = [*SWEEP, "attack.iterations=20", f"results_dir={tmp_path}"]
    first = run_audit(compose_cfg(*base, "attack=idlg"), tmp_path / "a")
    second = run_audit(compose_cfg(*base, "attack=dlg"), tmp_path / "b")
    assert second["run"]["trained_in"] == str(tmp_path / "a") and "trained_in" not in first["run"]
    assert second["run"]["training_key"] == first["run"]["training_key"]
    assert not (tmp_path / "b" / "payloads").exists() and second["timing"]["train_s"] == 0.0
    fresh = run_audit(compose_cfg(*base, "attack=dlg", "resume=false"), tmp_path / "c")
    assert "trained_in" not in fresh["run"] and (tmp_path / "c" / "payloads").exists()
    assert fresh["privacy"]["psnr_mean"] == second["privacy"]["psnr_mean"]  # same numbers as training again
    assert fresh["utility"] == second["utility"] and fresh["defense"] == second["defense"]


def test_summary_gives_95_percent_t_intervals_and_the_leak_verdict():
    runs = pd.DataFrame({"fl": "genefl", "payload": ["gradient"] * 3 + ["learngene"] * 2 + ["update"],
                         "attack": "idlg", "defense": "none", "seed": [0, 1, 2, 0, 1, 0],
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


def test_plots_show_run_controlled_text_as_text_never_mathtext():
    from privbench.report.curves import curve

    runs = pd.DataFrame({"payload": "p", "attack": ["$\\frac{1$", "$\\frac{1$", "b$c", "b$c"], "defense": "none",
                         "fl": "f", "model": "m", "data": "d", "seed": [0, 0, 0, 0], "victim.num_images": [1, 4, 1, 4],
                         "psnr_mean": [10.0, 12.0, 11.0, 13.0], "psnr_chance": 8.0, "psnr_gain": [2.0, 4.0, 3.0, 5.0],
                         "run_dir": ["a", "b", "c", "d"], "training_key": ["k1", "k2", "k3", "k4"]})
    png = curve(runs, ["attack", "victim.num_images"], "victim.num_images",
                [("psnr_mean", "PSNR (dB)")], title="$unbalanced")  # a mathtext parse would raise here
    assert png is not None and png.png[:4] == b"\x89PNG"


def test_tables_lead_with_the_trade_off_clip_ssim_to_its_range_and_say_when_seeds_are_few():
    from privbench.report.html import _runs_table
    from privbench.report.table import shown_columns

    runs = pd.DataFrame({"fl": "genefl", "payload": ["gradient"] * 2 + ["update"] * 3, "attack": "idlg",
                         "defense": "none", "seed": [0, 1, 0, 1, 2], "psnr_mean": [40.0, 44.0, 9.0, 11.0, 10.0],
                         "psnr_chance": 8.0, "psnr_gain": [32.0, 36.0, 1.0, 3.0, 2.0],
                         "ssim_mean": [0.99, 0.90, 0.1, 0.2, 0.3], "ssim_chance": [-0.30, 0.25, 0.2, 0.2, 0.2],
                         "personal_accuracy": 0.5, "total_bytes": 1e6, "run_dir": "x"})
    table = summarise(runs).set_index("payload")
    # by hand: SSIM mean 0.945, sd 0.0636, n 2 -> 0.945 +- 12.706 * 0.045 = [0.373, 1.517]: clipped to 1
    assert table.loc["gradient", "ssim_mean_hi"] == 1.0
    assert table.loc["gradient", "ssim_mean_lo"] == pytest.approx(0.945 - 12.7062 * 0.045, abs=1e-3)
    assert table.loc["gradient", "ssim_chance_lo"] == -1.0  # -0.025 +- 3.49: SSIM cannot go below -1
    columns = shown_columns(summarise(runs))
    assert columns[:7] == ["payload", "runs", "psnr_gain", "leaks", "personal_accuracy", "total_bytes", "psnr_mean"]
    md = to_markdown(summarise(runs))
    assert "Few seeds: 1 of 2 rows rest on fewer than 3 runs" in md
    assert "Few seeds" not in to_markdown(summarise(runs[runs.payload == "update"]))
    numeric = pd.DataFrame({"victim.num_images": [16, 1, 4], "seed": 0, "psnr_gain": 1.0, "accuracy": 0.5,
                            "total_bytes": 1.0, "epsilon": math.nan, "psnr_mean": 9.0, "psnr_chance": 8.0,
                            "run_dir": ["c", "a", "b"]})
    html_table = _runs_table(numeric, ["victim.num_images"])
    assert html_table.index("<td>1</td>") < html_table.index("<td>4</td>") < html_table.index("<td>16</td>")


def test_curves_name_every_series_by_its_keys_and_tick_at_the_swept_values():
    from privbench.report.curves import curve
    from privbench.report.draw import style

    rows = []
    for payload in ("update", "learngene"):
        for n in (1, 4, 16):
            rows.append({"payload": payload, "attack": "idlg", "defense": "none", "fl": "genefl", "seed": 0,
                         "victim.num_images": float(n), "psnr_mean": 10.0 + n, "psnr_chance": 8.0,
                         "psnr_gain": 2.0 + n, "run_dir": f"{payload}{n}", "training_key": f"k{n}"})
    rows.append({"payload": "update", "attack": "idlg", "defense": "none", "fl": "fedavg", "seed": 0,
                 "victim.num_images": math.nan, "psnr_mean": 9.0, "psnr_chance": 8.0, "psnr_gain": 1.0,
                 "run_dir": "ref", "training_key": "kr"})
    runs = pd.DataFrame(rows)
    drawn = curve(runs, ["payload", "fl", "victim.num_images"], "victim.num_images",
                  [("psnr_mean", "PSNR (dB)")], title="t")
    assert drawn is not None
    assert drawn.ticks == ["1", "4", "16"]  # at the swept values, whole numbers, though the axis is logarithmic
    assert "payload=update, fl=genefl" in drawn.legend and "payload=learngene, fl=genefl" in drawn.legend
    assert not any("nan" in t.lower() for t in drawn.legend)
    assert "payload=update, fl=fedavg" in drawn.legend  # the reference: a setting without the key
    assert sorted(drawn.panels[0]) == ["payload=learngene, fl=genefl", "payload=update, fl=fedavg",
                                       "payload=update, fl=genefl"] and len(drawn.panels) == 1
    assert "Dashed horizontal lines: settings without victim.num_images." in drawn.remark
    assert len({tuple(sorted(style(i).items())) for i in range(25)}) == 25  # no two series look alike


def _sweep(settings: dict[str, list[object]], seeds: int = 2, **figures: object) -> pd.DataFrame:
    """A runs frame: every combination of ``settings`` (key: values) with ``seeds`` seeds; ``figures`` a value
    per combination (a list) or one for all."""
    import itertools

    keys = list(settings)
    rows = []
    for i, values in enumerate(itertools.product(*settings.values())):
        for seed in range(seeds):
            row = {"fl": "genefl", "model": "m", "data": "d", "seed": seed, **dict(zip(keys, values)),
                   "psnr_mean": 10.0 + i + seed, "psnr_chance": 8.0, "psnr_gain": 2.0 + i + seed,
                   "run_dir": f"r{i}-{seed}", "training_key": f"k{i}-{seed}"}
            row.update({k: (v[i] if isinstance(v, list) else v) for k, v in figures.items()})
            rows.append(row)
    return pd.DataFrame(rows)


def test_a_two_setting_categorical_sweep_gets_a_strip_plot_and_no_pareto(tmp_path):
    from privbench.report.plots import choose, write_plots

    runs = _sweep({"attack": ["idlg", "ig"]}, seeds=3, personal_accuracy=[0.8, 0.9], total_bytes=1e6)
    table = summarise(runs)
    chosen = choose(runs, table)
    assert chosen.curves == [] and not chosen.pareto and chosen.strip
    written = write_plots(runs, table, tmp_path)
    assert set(written) == {"Leakage per setting"} and not (tmp_path / "pareto.png").exists()
    strip = written["Leakage per setting"][1]
    assert strip.panels == [["attack=idlg", "attack=ig"]]
    # three settings buying accuracy with leakage get the Pareto plot; with curves as well, no strip; where one
    # setting leaks least and is the most accurate, nothing trades off: no Pareto
    dominated = _sweep({"defense.sigma": [0.0, 0.1, 1.0]}, personal_accuracy=[0.9, 0.8, 0.7], total_bytes=1e6)
    assert not choose(dominated, summarise(dominated)).pareto
    traded = _sweep({"defense.sigma": [0.0, 0.1, 1.0]}, personal_accuracy=[0.7, 0.8, 0.9], total_bytes=1e6)
    chosen = choose(traded, summarise(traded))
    assert chosen.curves == ["defense.sigma"] and chosen.pareto and not chosen.strip
    # a numeric key with 3 values, each in another setting, is no curve
    from privbench.report.curves import swept_keys

    scattered = _sweep({"payload": ["a", "b", "c", "d"], "fl.gene.gamma": [1.0, 2.0, 3.0]})
    scattered = scattered[scattered["payload"].map(ord) - 96 == scattered["fl.gene.gamma"]]  # a:1, b:2, c:3
    assert swept_keys(scattered, ["payload", "fl.gene.gamma"]) == []
    assert swept_keys(_sweep({"payload": ["a"], "fl.gene.gamma": [1.0, 2.0, 3.0]}), ["fl.gene.gamma"]) == [
        "fl.gene.gamma"]


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_no_panel_holds_more_than_six_settings_and_names_fit_30_characters():
    from privbench.report.curves import curve
    from privbench.report.naming import LIMIT, MAX_SERIES
    from privbench.report.strips import strip_figure

    runs = _sweep({"payload": ["gradient", "update", "learngene"], "defense": ["none", "quantize", "topk"],
                   "victim.num_images": [1.0, 4.0, 16.0]})
    table = summarise(runs)
    keys = list(table.attrs["keys"])
    drawn = curve(runs, keys, "victim.num_images", [("psnr_gain", "gain")], title="t")
    assert drawn is not None and sum(map(len, drawn.panels)) == 9  # 9 settings of the other keys
    assert max(map(len, drawn.panels)) <= MAX_SERIES and len(drawn.panels) >= 2
    strip = strip_figure(runs, table, keys)
    assert strip is not None and sum(map(len, strip.panels)) == 27
    assert max(map(len, strip.panels)) <= MAX_SERIES
    # long values: faceting shortens names where it can; a name it cannot shorten becomes a code the key spells out
    long = _sweep({"payload": ["gradient_of_the_whole_batch", "update_after_local_training_steps"],
                   "defense": ["none", "quantize"], "attack": ["inverting_gradients_unrolled", "idlg"]})
    strip = strip_figure(long, summarise(long), list(summarise(long).attrs["keys"]))
    assert strip is not None and max(map(len, strip.panels)) <= MAX_SERIES
    assert all(len(n) <= LIMIT for n in [*(n for panel in strip.panels for n in panel), *strip.legend])
    one = _sweep({"payload": ["gradient_of_the_whole_batch_of_images", "update"]})
    strip = strip_figure(one, summarise(one), ["payload"])
    assert strip is not None and strip.panels == [["S1", "payload=update"]]
    assert strip.key == ["S1 = payload=gradient_of_the_whole_batch_of_images"]


def test_the_pareto_plot_labels_exactly_the_front():
    from privbench.report.pareto import pareto_figure

    # by hand: a (gain 10, acc 0.8), b (20, 0.9) and c (5, 0.5) trade off; d (25, 0.7) is worse than a on all
    table = pd.DataFrame({"defense": ["a", "b", "c", "d"], "psnr_gain": [10.0, 20.0, 5.0, 25.0],
                          "personal_accuracy": [0.8, 0.9, 0.5, 0.7], "total_bytes": 1e6})
    drawn = pareto_figure(table, ["defense"])
    assert drawn is not None
    from privbench.report.draw import FAILED

    assert sorted(n for n in drawn.notes if n != FAILED) == ["defense=a", "defense=b", "defense=c"]
    assert sorted(drawn.key) == ["defense=a = defense=a", "defense=b = defense=b", "defense=c = defense=c"]


def test_the_pareto_plot_draws_bytes_that_span_decades_on_a_log_scale():
    """LeNet's 0.13 MB against ResNet-18's 89 MB (photo_victims): a log colour scale, whose formatter has no offset
    (hiding a linear scale's offset there raised)."""
    from privbench.report.draw import spans_decades
    from privbench.report.pareto import pareto_figure

    table = pd.DataFrame({"model": ["lenet", "convnet", "resnet18"], "psnr_gain": [5.2, 12.5, -3.0],
                          "personal_accuracy": [0.5, 0.6, 0.7], "total_bytes": [126_608, 484_432, 89_468_816]})
    assert spans_decades(table["total_bytes"] / 1e6)
    drawn = pareto_figure(table, ["model"])
    assert drawn is not None and drawn.png.startswith(b"\x89PNG") and "total bytes, up + down (MB)" in drawn.axes


def test_every_family_s_table_has_a_verdict_from_its_headline_against_chance():
    """Membership (AUC over 0.5), label counts (an error below the prior's: lower leaks), a one-run audit (epsilon
    lower bound over 0) and source inference (over 1 / clients, paired per run): each row's verdict by hand."""
    runs = pd.DataFrame({
        "attack": ["lira"] * 3 + ["labels"] * 3 + ["one_run"] * 3 + ["source"] * 3 + ["lira_off"] * 3,
        "seed": [0, 1, 2] * 5,
        "mia_auc": [0.70, 0.72, 0.71, *[math.nan] * 3, 0.51, 0.50, 0.49, *[math.nan] * 3, 0.49, 0.53, 0.50],
        "label_count_error": [*[math.nan] * 3, 0.2, 0.3, 0.25, *[math.nan] * 9],
        "label_count_error_chance": [*[math.nan] * 3, 1.5, 1.4, 1.6, *[math.nan] * 9],
        "epsilon_lower_bound": [*[math.nan] * 6, 0.9, 1.1, 1.0, *[math.nan] * 6],
        "source_accuracy": [*[math.nan] * 9, 0.30, 0.10, 0.21, *[math.nan] * 3],
        "source_chance": [*[math.nan] * 9, 0.25, 0.25, 0.25, *[math.nan] * 3],
        "run_dir": "x"})
    table = summarise(runs).set_index("attack")
    assert table.loc["lira", "leaks"] == "yes" and table.loc["labels", "leaks"] == "yes"
    assert table.loc["one_run", "leaks"] == "yes"  # the one-run bound comes before the canaries' AUC (0.50)
    assert table.loc["source", "leaks"] == "attack failed"  # mean 0.203 < 0.25
    assert table.loc["lira_off", "leaks"] == "unclear"  # AUC 0.507 with an interval across 0.5
    informed = pd.DataFrame({"attack": "participation", "seed": [0, 1, 2], "mia_auc": [0.70, 0.72, 0.71],
                             "mia_auc_informed": [0.69, 0.73, 0.69], "run_dir": "x"})
    # the same AUC reads "yes" against 0.5, but the class alone gives as much: no evidence of participation
    assert summarise(informed).loc[0, "leaks"] == "unclear"


def test_pareto_front_counts_a_failed_attack_as_no_leak_not_as_depth():
    # -11.6 dB is not "more private" than -9.1 dB: both attacks failed, so the cheaper, more accurate row wins
    t = pd.DataFrame({"psnr_gain": [-11.6, -9.1, 3.0], "personal_accuracy": [0.90, 0.95, 0.99],
                      "total_bytes": [200.0, 100.0, 100.0]})
    assert pareto_front(t).tolist() == [False, True, True]
    t.loc[0, "psnr_gain"] = -9.1  # a tie at no leak: the row still loses on accuracy and bytes
    assert pareto_front(t).tolist() == [False, True, True]


def test_trade_off_figures_plot_one_kind_of_accuracy():
    from privbench.report.pareto import utility_figure

    rows = {"accuracy": [0.9, 0.8], "personal_accuracy": [0.95, math.nan], "downloaded_accuracy": [0.9, 0.8]}
    assert utility_figure(pd.DataFrame(rows)).key == "downloaded_accuracy"  # one row lacks its own model's figure
    rows["personal_accuracy"] = [0.95, 0.85]
    assert utility_figure(pd.DataFrame(rows)).key == "personal_accuracy"
    assert utility_figure(pd.DataFrame({"accuracy": [0.9]})).key == "accuracy"


def test_old_runs_fill_the_accuracy_column_their_accuracy_measured():
    from privbench.report.collect import named_accuracies

    frame = pd.DataFrame({"fl": ["fedavg", "local", "genefl", "genefl", "genefl"],
                          "fl.eval": [math.nan, math.nan, "cluster", "personal", "both"],
                          "accuracy": [0.5, 0.6, 0.7, 0.8, 0.9],
                          "personal_accuracy": [math.nan, math.nan, math.nan, math.nan, 0.95],
                          "downloaded_accuracy": math.nan})
    out = named_accuracies(frame)
    assert np.isnan(out.loc[0, "personal_accuracy"]) and out.loc[0, "downloaded_accuracy"] == 0.5
    assert out.loc[1, "personal_accuracy"] == 0.6 and np.isnan(out.loc[1, "downloaded_accuracy"])
    assert out.loc[2, "downloaded_accuracy"] == 0.7 and np.isnan(out.loc[2, "personal_accuracy"])
    assert out.loc[3, "personal_accuracy"] == 0.8 and np.isnan(out.loc[3, "downloaded_accuracy"])
    assert out.loc[4, "personal_accuracy"] == 0.95 and out.loc[4, "downloaded_accuracy"] == 0.9


def test_membership_runs_get_a_log_log_roc_and_no_gallery(tmp_path):
    from privbench.metrics.membership import tpr_at

    root = tmp_path / "sweep"
    # two seeds of one membership setting: 4 members, 4 non-members; seed 0 separates them, seed 1 is reversed
    for seed, scores in ((0, [8, 7, 6, 5, 4, 3, 2, 1]), (1, [1, 2, 3, 4, 5, 6, 7, 8])):
        metrics, config = _run("update", "lira", "none", seed, None, 0.5, 1000)
        metrics["privacy"].update(mia_auc=1.0 - seed, mia_members=4)
        folder = root / f"run{seed}"
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps(metrics))
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        members = np.array([True] * 4 + [False] * 4)
        order = np.argsort(-np.array(scores), kind="stable")
        tpr = np.concatenate([[0], np.cumsum(members[order]) / 4])
        fpr = np.concatenate([[0], np.cumsum(~members[order]) / 4])
        np.savez(folder / "membership.npz", scores=np.array(scores, float), members=members, fpr=fpr, tpr=tpr)
        # by hand: seed 0 reaches TPR 1 at FPR 0; seed 1 reaches TPR 0 until FPR 1
        assert tpr_at(fpr, tpr, np.array([0.25, 0.99, 1.0])).tolist() == ([1.0, 1.0, 1.0] if seed == 0
                                                                            else [0.0, 0.0, 1.0])
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "gallery.html").write_text("stale")
    out = build_report(root, tmp_path / "report")
    assert (out / "membership_roc.png").exists() and not (out / "gallery.html").exists()
    page = (out / "audit.html").read_text()
    assert "Membership ROC" in page and "n=2" in page and "gallery.html" not in page


def test_the_client_dp_trade_off_marks_each_point_with_its_epsilon() -> None:
    """Two protocols through no DP, clipping alone and two epsilons: a line each, every point marked with its
    claimed epsilon and the canaries' measure, chance drawn; runs without a client-level epsilon get no such plot."""
    from privbench.report.dp_tradeoff import applies, dp_tradeoff_figure

    rows = []
    for fl, shift in (("fedavg", 0.0), ("genefl", 0.05)):
        for eps, canary, auc, acc in ((None, None, 0.74, 0.80), (math.inf, None, 0.56, 0.77), (16.0, 15.2, 0.50, 0.15),
                                      (4.0, 3.72, 0.48, 0.10)):
            rows.append({"fl": fl, "aggregation.target_epsilon": eps, "client_epsilon": eps,
                         "client_epsilon_canary": canary, "mia_auc": auc - shift, "mia_auc_lo": auc - shift - 0.02,
                         "mia_auc_hi": auc - shift + 0.02, "downloaded_accuracy": acc + shift,
                         "mia_auc_informed": 0.49})
    table = pd.DataFrame(rows)
    assert applies(table) and not applies(table.assign(client_epsilon=float("nan")))
    drawn = dp_tradeoff_figure(table, ["fl", "aggregation.target_epsilon"])
    assert drawn is not None and drawn.png.startswith(b"\x89PNG")
    assert {"fl=fedavg", "fl=genefl", "chance"} <= set(drawn.legend)
    assert drawn.notes.count("no DP") == 2 and drawn.notes.count("eps inf") == 2
    assert "eps 4 (canaries 3.7)" in drawn.notes and "eps 16 (canaries 15)" in drawn.notes
    assert any("accuracy" in a for a in drawn.axes) and any("AUC" in a for a in drawn.axes)
