"""``privbench audit-app`` end to end on the example apps (``examples/``, Flower apps written for privbench in the
shape of Flower's own examples), each run in Flower's simulation as a user runs it: the command line, its exit
status, its files, and the figures a hand computation gives."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from privbench.payloads import PayloadStore

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
pytestmark = pytest.mark.slow  # each audit starts Flower's simulation (Ray): 15 to 25 s


def audit(path: Path, out: Path, *args: str) -> tuple[int, str, str, Path | None]:
    """Run the command; its exit status, stdout, stderr and results folder (None when it wrote none)."""
    done = subprocess.run([sys.executable, "-m", "privbench", "audit-app", str(path), "--out", str(out), *args],
                          capture_output=True, text=True, timeout=600)
    folders = sorted(out.iterdir()) if out.exists() else []
    return done.returncode, done.stdout, done.stderr, folders[-1] if folders else None


def test_the_quickstart_is_recorded_whole_and_audited_the_same_twice(tmp_path):
    runs = []
    for name in ("a", "b"):
        code, stdout, _, folder = audit(EXAMPLES / "quickstart-pytorch", tmp_path / name, "--fail-on",
                                        "membership_auc>0.99", "--junit", str(tmp_path / f"{name}.xml"))
        assert code == 0 and folder is not None, stdout
        runs.append(folder)
    a, b = (json.loads((f / "metrics.json").read_text()) for f in runs)
    assert len(a["uploads"]) == 8 and all("membership" in u and "labels" in u for u in a["uploads"])
    assert a["figures"] == b["figures"] and a["uploads"] == b["uploads"]
    rows, again = ([json.loads(line) for line in (f / "messages.jsonl").read_text().splitlines()] for f in runs)
    # the same messages, bytes and rounds; the app's own float metrics agree to 6 digits (its convolutions run in
    # other processes each time, where oneDNN may sum in another order: the app's, not the audit's)
    for r, s in zip(rows, again, strict=True):
        assert r.pop("metrics") == pytest.approx(s.pop("metrics"), rel=1e-5) and r == s
    # 4 SuperNodes, 2 rounds, train and evaluate both ways: 32 messages; every train message carries the model
    assert len(rows) == 32 and a["bytes"]["up train"]["messages"] == 8
    store = PayloadStore.open(runs[0] / "payloads")
    upload = store.load("r0002-update-client3-server")
    assert upload.base == "r0002-global_model-server-client3"
    assert upload.nbytes == 4 * sum(t.numel() for t in upload.tensors.values())
    assert all(r["array_bytes"] == upload.nbytes for r in rows if r["type"] == "train")
    suite = ET.parse(tmp_path / "a.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("1", "0")
    assert a["app"]["model"] == "quickstart_pt.task:Net"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_local_dp_noise_for_another_sensitivity_is_caught_in_one_run(tmp_path, seed):
    """Caught twice: from the mod's settings, and empirically by two canary clients whose uploads pass through it."""
    code, stdout, _, folder = audit(EXAMPLES / "local-dp-mod", tmp_path, "--seed", str(seed), "--fail-on", "misconfigured",
                                    "--supernodes", "5", "--canaries", "2", "--fail-on", "epsilon_empirical_lower>100")
    assert code == 1 and folder is not None
    assert "LocalDpMod: noise scaled for sensitivity 0.0001 but updates clipped to 1" in stdout
    summary = json.loads((folder / "metrics.json").read_text())
    (mechanism,) = summary["mechanisms"]
    z = 1e-4 * math.sqrt(2 * math.log(1.25 / 1e-5)) / 10.0  # the mod's std over the clip, by hand
    assert mechanism["noise_multiplier_measured"] == pytest.approx(z, rel=0.01)
    assert mechanism["epsilon_claimed"] == 10.0 and mechanism["epsilon_measured"] > 1e6
    canaries = summary["canaries"]
    assert canaries["verdict"].startswith("BROKEN") and "noise calibrated to another sensitivity" in canaries["verdict"]
    assert canaries["canary_shift"] == pytest.approx(1.0, abs=0.01)  # each canary clipped to the mod's clip, 1
    assert canaries["noise_measured"] == pytest.approx(z, rel=0.1) and canaries["rounds_observed"] == [1, 2]
    assert len(summary["app"]["canary_clients"]) == 2 and len(summary["uploads"]) == 2 * 3  # canaries not attacked
    assert "gate FAIL: epsilon_empirical_lower>100" in stdout and "canary clients: BROKEN" in stdout


def test_opacus_clients_that_forget_earlier_rounds_are_caught(tmp_path):
    from opacus.accountants import PRVAccountant

    code, stdout, _, folder = audit(EXAMPLES / "opacus-dp-sgd", tmp_path, "--fail-on", "epsilon-above-claim")
    assert code == 1 and folder is not None, stdout
    summary = json.loads((folder / "metrics.json").read_text())
    acc = PRVAccountant()  # the engines' own accountant (Opacus's default)
    acc.history = [(1.0, 32 / 256, 8)] * 2  # noise 1, Poisson rate 1/8, 8 steps a round, 2 rounds: by hand
    for mechanism in summary["mechanisms"]:
        assert mechanism["epsilon_measured"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)
        assert mechanism["epsilon_claimed"] < mechanism["epsilon_measured"]
    acc.history = acc.history[:1]
    for mechanism in summary["mechanisms"]:  # what each round's fresh engine reports
        assert mechanism["epsilon_claimed"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)
    assert len(summary["mechanisms"]) == 3 and "each report counts only its own round" in stdout


def test_central_dp_is_found_around_the_strategy_and_its_epsilon_is_scoped(tmp_path):
    from opacus.accountants import RDPAccountant

    code, stdout, _, folder = audit(EXAMPLES / "central-dp", tmp_path, "--canaries", "2")
    assert code == 0 and folder is not None, stdout
    summary = json.loads((folder / "metrics.json").read_text())
    (mechanism,) = summary["mechanisms"]
    assert (mechanism["mechanism"], mechanism["noise_multiplier"], mechanism["clip"]) == (
        "DifferentialPrivacyServerSideFixedClipping", 0.8, 0.5)
    acc = RDPAccountant()
    acc.history = [(0.8, 1.0, 2)]
    assert mechanism["epsilon_measured"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)
    assert "it sees every update without the noise" in mechanism["covers"]
    canaries = summary["canaries"]  # two canaries of four clients, the wrapper's own noise: consistent, 0.8 measured
    assert canaries["verdict"].startswith("consistent") and canaries["noise_measured"] == pytest.approx(0.8, rel=0.1)
    assert canaries["canary_share"] == pytest.approx(1.0)  # equal partitions: FedAvg's weights are the wrapper's
    assert 0.2 < canaries["canary_shift"] < 2.6  # one clip norm a round (4 draws of noise 0.8: within 3 sd)
    assert canaries["epsilon_planned"] == pytest.approx(mechanism["epsilon_measured"])


def test_adaptive_clipping_is_measured_at_each_round_s_clip_and_its_spending_is_scoped(tmp_path):
    """Flower's server-side adaptive wrapper (4 rounds, z 0.8, count noise 1): the clip it held each round is noted,
    the canaries follow it and read its mean's noise, and the epsilon its rounds spent (the uncentred count, the clip
    after each update) is above the one its setting states, in one line."""
    code, stdout, stderr, folder = audit(EXAMPLES / "central-dp", tmp_path, "--run-config", "adaptive=true",
                                         "--run-config", "num-server-rounds=4", "--canaries", "2")
    assert code == 0 and folder is not None, stdout + stderr[-2000:]
    summary = json.loads((folder / "metrics.json").read_text())
    (mechanism,) = summary["mechanisms"]
    assert mechanism["mechanism"] == "DifferentialPrivacyServerSideAdaptiveClipping"
    clips = [mechanism["adaptive_clips"][str(r)] for r in range(1, 5)] + [mechanism["adaptive_clip_final"]]
    assert clips[0] == 0.5 and len(set(clips)) == 5  # the initial clip, then one per update
    assert mechanism["noise_multiplier_stated"] == mechanism["noise_multiplier"] == pytest.approx(0.8)
    z_delta = mechanism["noise_multiplier_model"]
    by_hand = sum((a / b / z_delta) ** 2 + 1.0 for a, b in zip(clips, clips[1:]))  # sigma_b 1: the count's 1 / 1
    assert mechanism["mu_as_run"] == pytest.approx(math.sqrt(by_hand))
    assert mechanism["epsilon_measured"] == mechanism["epsilon_as_run"] > mechanism["epsilon_stated"]
    assert "adaptive clipping spent epsilon" in stderr + stdout
    canaries = summary["canaries"]
    assert canaries["verdict"].startswith("consistent") and canaries["rounds_observed"] == [1, 2, 3, 4]
    mean_only = sum((a / b / z_delta) ** 2 for a, b in zip(clips, clips[1:]))  # the mean's share, as it ran
    assert canaries["noise_multiplier_planned"] == pytest.approx(2 / math.sqrt(mean_only))
    assert canaries["noise_measured"] == pytest.approx(z_delta, rel=0.15)


def test_secure_aggregation_hides_the_uploads_and_a_gate_on_them_cannot_pass(tmp_path):
    from opacus.accountants import RDPAccountant

    code, stdout, _, folder = audit(EXAMPLES / "secagg-central-dp", tmp_path, "--fail-on", "membership_auc>0.6")
    assert code == 1 and folder is not None, stdout  # nothing measured on the uploads: the rule cannot pass
    summary = json.loads((folder / "metrics.json").read_text())
    assert summary["uploads"] == [] and "masked vectors" in summary["notes"][0]
    names = [m["mechanism"] for m in summary["mechanisms"]]
    assert names == ["secure aggregation (secaggplus_mod)", "fixedclipping_mod",
                     "DifferentialPrivacyClientSideFixedClipping"]
    wrapper = summary["mechanisms"][2]
    assert wrapper["clients_sent"] == [4, 4]  # four SecAgg+ stages a round, four clients
    acc = RDPAccountant()
    acc.history = [(0.5, 1.0, 2)]
    assert wrapper["epsilon_measured"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)
    assert "under secure aggregation it sees only their sum" in wrapper["covers"]
    assert summary["bytes"]["up train"]["array_bytes"] == 0 and summary["bytes"]["up train"]["wire_bytes"] > 0


def test_a_legacy_numpy_client_app_is_read_by_position(tmp_path):
    code, stdout, _, folder = audit(EXAMPLES / "legacy-numpy-client", tmp_path)
    assert code == 0 and folder is not None, stdout
    summary = json.loads((folder / "metrics.json").read_text())
    assert summary["app"]["model"] == "legacy_app.task:Net" and summary["app"]["rounds"] == 2
    upload = PayloadStore.open(folder / "payloads").load("r0001-update-client2-server")
    # the legacy list of arrays, named by the model's state dict in order (batch norm's buffers included)
    assert upload.names == ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
                            "bn.num_batches_tracked", "fc.weight", "fc.bias"]
    assert len(summary["uploads"]) == 6 and all("membership" in u and "labels" in u for u in summary["uploads"])


def test_small_clients_uploads_are_inverted_and_gated(tmp_path):
    code, stdout, _, folder = audit(EXAMPLES / "quickstart-pytorch", tmp_path, "--run-config", "records-per-client=2",
                                    "--inversion-steps", "200", "--fail-on", "psnr_gain>30")
    assert code == 0 and folder is not None, stdout
    summary = json.loads((folder / "metrics.json").read_text())
    for u in summary["uploads"]:  # two records each: inverted, scored against the client's own evaluation records
        r = u["reconstruction"]
        assert r["num_reconstructed"] == r["num_true"] == 2 and r["budget"]["iterations"] == 200
        assert r["input_scale"] == {"mean": [0.5], "std": [0.5]}  # the quickstart's (x - 0.5) / 0.5, read back
        assert (folder / "reconstructions" / f"r{u['round']:04d}-{u['client']}" / "grid.png").is_file()
    assert summary["figures"]["psnr_gain"] is not None and "gate pass: psnr_gain>30" in stdout


def test_a_failing_client_app_is_one_line_and_no_result(tmp_path):
    app = tmp_path / "broken"
    (app / "broken_app").mkdir(parents=True)
    (app / "pyproject.toml").write_text(textwrap.dedent("""
        [project]
        name = "broken"
        version = "1.0.0"
        [tool.flwr.app]
        publisher = "me"
        [tool.flwr.app.components]
        serverapp = "broken_app.main:server"
        clientapp = "broken_app.main:client"
        [tool.flwr.app.config]
        rounds = 1
        [tool.flwr.federations]
        default = "sim"
        [tool.flwr.federations.sim]
        options.num-supernodes = 2
        """))
    (app / "broken_app" / "__init__.py").write_text("")
    (app / "broken_app" / "main.py").write_text(textwrap.dedent("""
        import torch
        from flwr.app import ArrayRecord
        from flwr.clientapp import ClientApp
        from flwr.serverapp import ServerApp
        from flwr.serverapp.strategy import FedAvg

        client, server = ClientApp(), ServerApp()

        @client.train()
        def train(msg, context):
            raise ValueError("the loader found no data")

        @server.main()
        def main(grid, context):
            FedAvg(min_available_nodes=2).start(grid=grid, initial_arrays=ArrayRecord(torch.nn.Linear(2, 2).state_dict()),
                                                num_rounds=1)
        """))
    code, _, stderr, folder = audit(app, tmp_path / "out")
    lines = [ln for ln in stderr.splitlines() if ln.startswith("privbench audit-app: error:")]
    assert code == 2 and folder is None
    assert len(lines) == 1 and "the ClientApp on node" in lines[0] and "the loader found no data" in lines[0], stderr
    assert torch is not None


def test_each_rounds_aggregate_tells_which_clients_took_part_even_under_secure_aggregation(tmp_path):
    """8 SuperNodes, half of them a round, 4 rounds: every (round, client) pair of the clients that trained, the
    train replies its members. Clients that memorise 16 records in 5 epochs are told apart from the aggregates alone
    (0.90-0.93 over three audits); the SecAgg+ app's aggregates are attacked although its uploads are masked."""
    sampled = ["--supernodes", "8", "--run-config", "fraction-train=0.5", "--run-config", "num-server-rounds=4"]
    code, stdout, _, folder = audit(EXAMPLES / "quickstart-pytorch", tmp_path / "q", *sampled, "--run-config",
                                    "records-per-client=16", "--run-config", "local-epochs=5", "--fail-on",
                                    "participation_auc>0.75")
    assert code == 1 and folder is not None, stdout  # the gate reads the aggregates' figure
    got = json.loads((folder / "metrics.json").read_text())["aggregates"]
    # Flower samples among the nodes registered when a round starts: the members are the train replies recorded
    rows = [json.loads(line) for line in (folder / "messages.jsonl").read_text().splitlines()]
    replies = {(r["round"], r["client"]) for r in rows if r["direction"] == "up" and r["type"] == "train"}
    trained = {c for _, c in replies}
    assert (got["rounds"], got["clients"], got["pairs"]) == (4, len(trained), 4 * len(trained))
    assert got["members"] == len(replies) and 8 <= len(replies) <= 16
    assert got["participation_auc"] > 0.75 and got["participation_auc_interval"][0] > 0.5
    code, stdout, _, folder = audit(EXAMPLES / "secagg-central-dp", tmp_path / "s", *sampled)
    assert code == 0 and folder is not None, stdout
    summary = json.loads((folder / "metrics.json").read_text())
    assert summary["uploads"] == [] and 8 <= summary["aggregates"]["members"] <= 16
    assert 0.0 <= summary["aggregates"]["participation_auc"] <= 1.0


def test_reported_evaluation_figures_tell_the_server_each_client_s_class_shares(tmp_path):
    """The quickstart with label skew (half of each client's records from one class): its evaluate replies' loss and
    accuracy over 5 rounds (10 figures, 10 classes) name the dominant class of the trouser and the dress clients and
    bring their shares within 0.3 of the truth (chance 0.45-0.49 at seed 0); the gate reads the mean gain."""
    code, stdout, _, folder = audit(EXAMPLES / "quickstart-pytorch", tmp_path / "q", "--run-config",
                                    "dominant-share=0.5", "--run-config", "num-server-rounds=5", "--fail-on",
                                    "class_proportion_gain>0.05")
    assert code == 1 and folder is not None, stdout
    summary = json.loads((folder / "metrics.json").read_text())
    rows = [r for r in summary["reported_metrics"] if "class_proportion_error" in r]
    assert len(rows) == 4 and all(r["read_as"] == {"eval_acc": "hit_rate", "eval_loss": "loss"} for r in rows)
    assert all(r["consistent"] and not r["not_read"] for r in rows)
    assert all(max(r["true_proportions"]) >= 0.5 for r in rows)  # the skew, as the loaders yielded it
    assert sum(r["top_class"] for r in rows) >= 2 and all(r["top_class_chance"] == 0.1 for r in rows)
    assert sum(r["class_proportion_error"] < r["class_proportion_error_chance"] - 0.15 for r in rows) >= 2
    assert summary["figures"]["class_proportion_gain"] > 0.05
    assert "Attacks on each client's reported metrics" in (folder / "report.md").read_text()
