"""The ``python -m privbench`` app end to end: help, one-line errors, outputs, multirun."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from privbench.payloads import PayloadStore

TINY = ["data.num_clients=4", "data.partition=iid", "fl.rounds=2", "fl.participants=2", "fl.local_epochs=1",
        "attack.iterations=40", "attack.restarts=1"]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-m", "privbench", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow  # two processes, 11 s; run by .ci/run with the slow suite
def test_help_lists_groups_and_options(tmp_path):
    out = cli("--help", cwd=tmp_path)
    assert out.returncode == 0
    for line in ("attack: bias_sign, class_set, cpa, disguised_trap, dlg, fedavg_inversion, idlg, ig, ig_paper, imprint, labels, lira, loki, membership, mia_ladder, none, one_run, participation, projection, rmia, sme, source, spear, trap_behind_pca, trap_weights",
                 "payload: aggregate, cluster_gene, cluster_model, gene_gradient, global_model, gradient, learngene, "
                 "masked_upload, secagg_forwarded_shares, secagg_key_shares, secagg_neighbour_keys, secagg_public_keys, "
                 "secagg_unmask_request, secagg_unmask_shares, subspace, update",
                 "aggregation: dpfedavg, dpfedavg_secagg, plain, secagg",
                 "model: convnet, lenet, mlp, resnet18, torchvision", "fl: cluster_fedavg, fedavg, genefl, local",
                 "defense: dpsgd, noise, none, prune, quantize, topk",
                 "experiment: active_genefl, active_server, adaptive_server, bytes_curve, client_dp, client_dp_classes, client_dp_lira, client_dp_uploads, cohort_separation, comm_accounting, dlg_batch, dlg_paper, dp_coverage, dp_curve, exact_batch, exact_cpa, fedavg_leakage, idlg_paper, learngene_completion, loki, "
                 "membership_ladder, membership_leakage, "
                 "paper_cifar10, photo_victims, "
                 "privacy_tradeoff, secure_aggregation, server_threat, sme_leakage, threat_grid, threat_grid2, trap_weights, victim_settings, "
                 "xi_direction",
                 "experiment/threat_grid: gradient, learngene, update"):
        assert line in out.stdout
    for line in ("  lr: 0.1  # [a number > 0 and <= 100] local SGD learning rate.",
                 "    gamma: 0.5  # [a count of layers (an integer >= 1) or a fraction in (0, 1)] kept:",
                 "threads: auto  # torch threads", "  num_images: 1  # [an integer >= 1] images in the victim's batch",
                 "  lpips: true  # [true or false] also score LPIPS"):
        assert line in out.stdout  # each key with its description, its declared range in front
    chosen = cli("attack=ig", "fl=fedavg", "--help", cwd=tmp_path)
    assert "  tv: " in chosen.stdout and "fl:  # FedAvg" in chosen.stdout


def _keys(node: dict, prefix: str = ""):  # type: ignore[type-arg]
    for key, value in node.items():
        if key != "_target_":
            yield f"{prefix}{key}"
            if isinstance(value, dict):
                yield from _keys(value, f"{prefix}{key}.")


@pytest.mark.slow
def test_every_key_of_every_option_has_a_description():
    from omegaconf import OmegaConf

    from privbench.keys import CONF, describe
    from privbench.naming import register
    from privbench.overrides import compose_full

    register()
    missing = []
    for group in ("data", "model", "fl", "payload", "attack", "defense", "engine"):
        for option in sorted(p.stem for p in (CONF / group).glob("*.yaml")):
            cfg = compose_full([f"{group}={option}"])
            described = describe(cfg)
            plain = OmegaConf.to_container(cfg, resolve=False)
            plain.pop("hydra")
            missing += [f"{group}={option}: {k}" for k in _keys(plain) if k not in described]
    assert not missing, missing[:20]


@pytest.mark.slow  # each case starts a process; tests/test_invalid_corpus.py checks the messages in-process
@pytest.mark.parametrize("args, message", [
    (["attack=nope"], "attack=nope: unknown option (did you mean attack=none?); allowed: bias_sign, class_set, cpa, disguised_trap, dlg, fedavg_inversion, idlg, ig, ig_paper, imprint, labels, lira, loki, membership, mia_ladder, none, one_run, participation, projection, rmia, sme"),
    (["bogus=1"], "bogus: unknown key; allowed keys:"),
    (["fl.lr=-1"], "fl.lr=-1: must be a number > 0"),
    (["fl.participants=11"], "fl.participants=11 exceeds data.num_clients=10"),
    (["victim.num_images=6001"], "victim.num_images=6001 exceeds client 0's"),
    (["fl=fedavg", "payload=global_model"], "attack=idlg cannot attack payload=global_model"),
    (["payload=global_model"], "payload=global_model: fl=genefl sends subspace, cluster_model, learngene"),
    (["fl=local"], "fl=local sends nothing (use attack=none)"),
    (["fl.gene.gamma=9"], "fl.gene.gamma=9 exceeds the model's 4 layers"),
    (["data=cifar10"], "data.download=true"),
])
def test_bad_input_is_one_line_without_traceback(tmp_path, args, message):
    out = cli(*args, f"results_dir={tmp_path}", cwd=tmp_path)
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("privbench: error: ") and message in lines[0], out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    assert not list(tmp_path.rglob("metrics.json"))
    assert not list(tmp_path.rglob(".hydra")), "a refused run left its folder behind"


@pytest.mark.slow
def test_audit_writes_every_output(tmp_path):
    out = cli("fl=fedavg", "payload=gradient", "data.agnostic_classes=[]", *TINY, f"results_dir={tmp_path}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    [run] = list((tmp_path / "fedavg-gradient-idlg-none").iterdir())
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["run"]["payload"] == "gradient" and metrics["privacy"]["label_source"] == "recovered"
    assert metrics["privacy"]["psnr_mean"] > 0 and 0 <= metrics["utility"]["accuracy"] <= 1
    # protocol bytes: 2 rounds x 2 participants, full model each way; the victim's gradient is audit-only
    assert metrics["bytes"]["uplink_bytes"] == 4 * 53704 and metrics["bytes"]["downlink_bytes"] == 4 * 53704
    assert metrics["bytes"]["payload_bytes"] == 53704
    comm = json.loads((run / "comm.json").read_text())
    assert comm["audit_only"]["uplink_bytes"] == 53704 and comm["by_kind"]["gradient"] == 53704
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert len(rows) == 1 and float(rows[0]["psnr_mean"]) == pytest.approx(metrics["privacy"]["psnr_mean"])
    assert float(rows[0]["psnr_gain"]) == pytest.approx(float(rows[0]["psnr_mean"]) - float(rows[0]["psnr_chance"]))
    assert Image.open(run / "grid.png").size == (28 * 4 + 4, 2 * 28 * 4 + 6)
    threat = json.loads((run / "threat_model.json").read_text())
    assert threat["labels"] == "not given" and threat["visible_fraction"] == 1.0 and threat["batch_size"] == 1
    assert "fl:\n  _target_: privbench.fl.protocols.fedavg.FedAvg" in (run / "config.yaml").read_text()
    store = PayloadStore.open(run / "payloads")
    assert store.load(threat["payload"]).kind == "gradient"
    assert "PSNR" in out.stdout and "chance" in out.stdout and "bytes    up" in out.stdout
    summary = out.stdout[out.stdout.index("run      "):out.stdout.index("results: ")]
    assert all(len(line) <= 80 for line in summary.splitlines())  # fits an 80-column terminal


@pytest.mark.slow
def test_multirun_runs_each_job(tmp_path):
    out = cli("-m", "attack=dlg,idlg", "fl=fedavg", "payload=gradient", *TINY, f"results_dir={tmp_path}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    done = sorted(json.loads(p.read_text())["run"]["attack"] for p in tmp_path.glob("multirun/*/*/metrics.json"))
    assert done == ["dlg", "idlg"]


@pytest.mark.slow
def test_genefl_audit_writes_comm_and_agnostic_results(tmp_path):
    out = cli(*TINY, "fl.num_clusters=2", "fl.subspace_dim=3", "fl.agnostic.epochs=1", f"results_dir={tmp_path}",
              cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    [run] = list((tmp_path / "genefl-learngene-idlg-none").iterdir())
    comm = json.loads((run / "comm.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text())
    index = json.loads((run / "payloads" / "index.json").read_text())
    up = sum(r["nbytes"] for r in index if r["direction"] == "up" and r["kind"] not in ("gradient", "gene_gradient")
             and r["round"] < 2)
    assert comm["training"]["uplink_bytes"] == up == metrics["bytes"]["uplink_bytes"]
    assert comm["vs_fedavg"]["uplink_ratio"] == pytest.approx(up / comm["fedavg_reference"]["uplink_bytes"])
    assert set(comm["by_round"]) == {"0", "1", "2"} and "client0" in comm["by_client"]
    assert 0 <= metrics["utility"]["agnostic_accuracy_learngene"] <= 1
    assert metrics["threat_model"]["payload_kind"] == "learngene" and metrics["threat_model"]["visible_fraction"] < 1


def test_run_summary_wraps_long_settings_at_80_columns():
    from privbench.audit.summary import summary

    metrics = {"run": {"fl": "cluster_fedavg", "payload": "cluster_model", "attack": "projection",
                       "defense": "dpsgd", "seed": 123456, "victim_client": 10, "victim_round": 99},
               "privacy": {"psnr_mean": 12.345, "psnr_chance": 16.6, "psnr_gain": -4.255, "num_reconstructed": 64,
                           "num_true": 400, "ssim_mean": 0.1, "ssim_chance": 0.3, "lpips_mean": float("nan"),
                           "lpips_chance": float("nan"), "label_accuracy": float("nan")},
               "utility": {"accuracy": 0.5, "personal_accuracy": 0.9, "downloaded_accuracy": 0.5, "agnostic_accuracy_learngene": 0.97},
               "bytes": {"uplink_bytes": 123456789012, "downlink_bytes": 123456789012, "total_ratio": 0.5},
               "defense": {"epsilon": 123.456, "epsilon_max": 234.5, "epsilon_covers_all_reads": True}}
    text = summary(metrics)
    assert all(len(line) <= 80 for line in text.splitlines()) and len(text.splitlines()) >= 7
    assert "gain -4.25 dB" in text and "LPIPS - (chance -)" in text and "covers every read: yes" in text


def test_descriptions_come_from_comments_then_docstrings():
    from privbench.keys import docstring_args, yaml_comments

    text = ("# the file's header, not a key's\n_target_: x.Y\nlr: 0.1  # step size\n# above the key\nname: 'a # b'\n"
            "gene:\n  gamma: 2 # layers kept\nplain: 3\n")
    assert yaml_comments(text) == {"lr": "step size", "name": "above the key", "gene.gamma": "layers kept"}
    args = docstring_args("privbench.fl.protocols.genefl.GeneFL")
    assert args["lambda2"] == "weight of the Fisher-elastic term."  # GeneFL's own Args
    assert args["participants"] == "clients sampled per round (without replacement)."  # from FederatedProtocol
    assert args["downlink"].startswith("full (the paper: the whole cluster model each round) or gene")  # continued lines


def test_an_epsilon_with_uncovered_reads_is_printed_unbounded_with_the_reads_named():
    from privbench.audit.summary import summary

    metrics = {"run": {"fl": "genefl", "payload": "learngene", "attack": "none", "defense": "dpsgd", "seed": 0,
                       "victim_client": 0, "victim_round": 0},
               "privacy": {}, "utility": {"accuracy": 0.5}, "bytes": {"uplink_bytes": 1, "downlink_bytes": 1},
               "defense": {"epsilon": "inf", "epsilon_accounted": 6.368, "epsilon_max": "inf",
                           "epsilon_max_accounted": 6.649, "epsilon_covers_all_reads": False,
                           "uncovered_reads": ["subspace", "fisher_diagonal"]}}
    text = " ".join(summary(metrics).split())
    assert ("epsilon unbounded (uncovered reads released exactly: subspace, fisher_diagonal); accounted releases "
            "6.37 (victim), max 6.65") in text
    assert "covers every read" not in text
