"""engine=flower: payloads in Flower messages, capture at the grid, the same run as in process."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import ArrayRecord, ConfigRecord, Context, Error, Message, MessageType, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from privbench import api  # noqa: E402
from privbench.app_audit.deployment import free_ports  # noqa: E402
from privbench.audit.plan import plan  # noqa: E402
from privbench.audit.run import run_audit  # noqa: E402
from privbench.errors import ConfigError  # noqa: E402
from privbench.fl.trainer import SGDTrainer  # noqa: E402
from privbench.fl.wire import Wire  # noqa: E402
from privbench.flower.capture import CapturingGrid, FlowerClientError  # noqa: E402
from privbench.flower.client_app import app as client_app  # noqa: E402
from privbench.flower.codec import REPORT, payloads_in, put_payloads  # noqa: E402
from privbench.flower.launch import FlowerGrid  # noqa: E402
from privbench.payloads import CapturePolicy, Condensation, LocalTraining, Payload, PayloadStore  # noqa: E402

SMALL = ["data.num_clients=5", "fl.rounds=2", "fl.participants=3", "fl.local_epochs=1", "victim.round=1"]
CLUSTERED = ["fl.num_clusters=2", "fl.agnostic.fedavg_reference=false", "fl.agnostic.epochs=0"]


@pytest.fixture
def task_identity(monkeypatch):
    """Flower stamps messages with the running task's identity; a ServerApp sets it, here the test does."""
    for attr in ("_run_id", "_task_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, attr, 1)


class LoopbackGrid:
    """A Grid whose SuperNodes are ``client_app`` called in this process, node ``100 + i`` holding client ``i``."""

    def __init__(self, num_clients: int, *, fail: str | None = None, drop: bool = False) -> None:
        self.contexts = {100 + i: Context(run_id=1, node_id=100 + i, node_config={"partition-id": i,
                                                                                   "num-partitions": num_clients},
                                          state=RecordDict(), run_config={}) for i in range(num_clients)}
        self.fail, self.drop, self.sent = fail, drop, 0

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        replies = []
        for m in messages:
            self.sent += 1
            if self.fail and m.metadata.message_type == MessageType.TRAIN:
                replies.append(Message(Error(code=1, reason=self.fail), reply_to=m))
            elif not (self.drop and m.metadata.message_type == MessageType.TRAIN):
                # a message crosses the transport serialised: a ClientApp never shares the server's objects
                replies.append(client_app(copy.deepcopy(m), self.contexts[m.metadata.dst_node_id]))
        return replies


def _payload() -> Payload:
    training = LocalTraining(epochs=1, lr=0.1, batch_size=2, steps=3, num_samples=5)
    return Payload.from_tensors(kind="learngene", round=3, sender="client2", receiver="server",
                                tensors={"fc.weight": torch.randn(4, 3), "fc.bias": torch.arange(4.0)},
                                base="r0003-cluster_model-server-client2", cluster=1, training=training,
                                condensation=Condensation(("fc",), {"fc": 0.5, "conv": 0.1}))


def test_a_payload_survives_a_flower_message_exactly(task_identity):
    sent = _payload()
    content = RecordDict()
    put_payloads(content, [sent, sent])
    got = payloads_in(content)
    assert len(got) == 2
    assert got[0].record() == sent.record()  # id, kind, round, sender, bytes, training, condensation
    assert got[0].nbytes == 4 * 3 * 4 + 4 * 4
    assert list(got[0].tensors) == ["fc.weight", "fc.bias"]
    for name, t in sent.tensors.items():
        assert torch.equal(got[0].tensors[name], t)


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_no_ground_truth_travels_in_a_flower_message(tmp_path, task_identity):
    """A client's reply carries its uploads, never the indices of the images they were computed from."""
    cfg = api.compose([*SMALL, *CLUSTERED, "engine=flower", "attack=none", "victim.num_images=2"])
    grid = LoopbackGrid(7)
    seen: list[Message] = []
    real = grid.send_and_receive

    def spying(messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        messages = list(messages)
        replies = real(messages, timeout=timeout)
        seen.extend([*messages, *replies])
        return replies

    grid.send_and_receive = spying  # type: ignore[method-assign]
    run_audit(cfg, tmp_path / "run", launcher=FlowerGrid(grid))
    replies = [m for m in seen if m.metadata.message_type == MessageType.TRAIN and "payload.0" in m.content]
    assert replies
    for message in seen:
        for key, record in message.content.config_records.items():
            assert "truth" not in json.dumps({k: str(v) for k, v in record.items()}), (key, message.metadata)
    # the evaluator still knows it: the store's ground-truth table, rebuilt from the federation's data
    store = PayloadStore.open(tmp_path / "run" / "payloads")
    gradient = next(store.records(kind="gradient"))
    assert len(store.truth(gradient["id"])) == 2 and not (tmp_path / "run" / "payloads" / "truth.json").read_text() == "{}"


def test_a_message_whose_tensors_do_not_match_its_bytes_is_refused(task_identity):
    content = RecordDict()
    put_payloads(content, [_payload()])
    content["payload.0"] = ArrayRecord(torch_state_dict={"fc.weight": torch.zeros(2)})
    with pytest.raises(ValueError, match="not the 64 bytes it declares"):
        payloads_in(content)


def _wire(tmp_path: Path) -> Wire:
    return Wire(PayloadStore(tmp_path / "payloads"), CapturePolicy(kinds="all", rounds="all", clients="all"),
                sends=("learngene", "cluster_model"), trainer=SGDTrainer())


class EchoGrid(LoopbackGrid):
    """Replies to every message with the same payload, sent by the node."""

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        out = []
        for m in messages:
            content = RecordDict({"privbench": ConfigRecord({})})
            put_payloads(content, [_payload()])
            out.append(Message(content, reply_to=m))
        return out


def test_the_capturing_grid_records_both_directions_and_counts_bytes(tmp_path, task_identity):
    wire = _wire(tmp_path)
    down = Payload.from_tensors(kind="cluster_model", round=3, sender="server", receiver="client2",
                                tensors={"fc.weight": torch.ones(4, 3)})
    content = RecordDict()
    put_payloads(content, [down])
    grid = CapturingGrid(EchoGrid(1), wire)  # type: ignore[arg-type]
    grid.send_and_receive([Message(content, 100, MessageType.TRAIN)])
    ids = [r["id"] for r in wire.store.records()]
    assert ids == ["r0003-cluster_model-server-client2", "r0003-learngene-client2-server"]
    assert wire.totals().downlink_bytes == 48 and wire.totals().uplink_bytes == 64
    assert grid.messages == 2


def test_a_kind_the_protocol_did_not_declare_is_refused_at_capture(tmp_path, task_identity):
    wire = Wire(PayloadStore(tmp_path / "p"), CapturePolicy(kinds="all", rounds="all", clients="all"),
                sends=("cluster_model",), trainer=SGDTrainer())
    with pytest.raises(Exception, match="declared it sends cluster_model, not learngene"):
        CapturingGrid(EchoGrid(1), wire).send_and_receive(  # type: ignore[arg-type]
            [Message(RecordDict(), 100, MessageType.TRAIN)])


@pytest.mark.parametrize("grid, message", [
    (LoopbackGrid(7, fail="out of memory"), r"node 10[0-9]\) failed: out of memory"),
    (LoopbackGrid(7, drop=True), "did not reply within"),
    (LoopbackGrid(4), r"no SuperNode holds partition 4 \(client 4\)"),
    (LoopbackGrid(6), r"no SuperNode holds partition 6 \(agnostic client 1\): this run needs one node per client, "
                      "5 known then 2 agnostic"),
])
def test_client_failures_and_missing_nodes_are_one_clear_error(tmp_path, task_identity, monkeypatch, grid, message):
    monkeypatch.setattr("privbench.flower.engine.NODE_WAIT_S", 0.2)
    cfg = api.compose([*SMALL, *CLUSTERED, "engine=flower", "attack=none", f"results_dir={tmp_path}"])
    with pytest.raises(FlowerClientError, match=message):
        run_audit(cfg, tmp_path / "run", launcher=FlowerGrid(grid))


@pytest.mark.parametrize("overrides, message", [
    (["fl=local"], "fl=local sends nothing"),
    (["defense=dpsgd", "fl=fedavg", "aggregation=secagg", "payload=aggregate"],
     "aggregation=secagg with the dpsgd trainer: Flower's SecAgg\\+ mod answers for the ClientApp"),
    (["fl.downlink=gene"], "fl.downlink=gene rebuilds each client's model"),
    (["fl.eval=both"], "fl.eval=both scores each client's own trained model"),
    (["fl.vectorise=true"], "fl.vectorise=true stacks a round's clients"),
    (["aggregation=secagg", "payload=aggregate"], r"aggregation=secagg: Flower's SecAgg\+ sums one layout"),
])
def test_settings_flower_cannot_run_fail_before_compute(overrides, message):
    with pytest.raises(ConfigError, match=f"engine=flower: {message}"):
        plan(api.compose([*overrides, "engine=flower"]))


def test_an_unknown_engine_is_refused():
    with pytest.raises(ConfigError, match="engine=grpc"):
        api.compose(["engine=grpc"])


def _records(run: Path) -> list[dict]:
    keep = ("id", "kind", "round", "sender", "receiver", "names", "shapes", "nbytes", "base", "cluster", "phase")
    truth = PayloadStore.open(run / "payloads")
    return [{**{k: r[k] for k in keep}, "truth": truth.truth(r["id"])}
            for r in json.loads((run / "payloads" / "index.json").read_text())]


def _same_run(a: Path, b: Path, *, atol: float) -> None:
    """Both runs sent the same messages, the same bytes, tensors within ``atol``; the same accuracy."""
    assert _records(a) == _records(b)
    ma, mb = (json.loads((r / "metrics.json").read_text()) for r in (a, b))
    for key in ("uplink_bytes", "downlink_bytes", "total_bytes"):
        assert ma["bytes"][key] == mb["bytes"][key]
    assert json.loads((a / "comm.json").read_text())["by_kind"] == json.loads((b / "comm.json").read_text())["by_kind"]
    assert ma["utility"].get("clusters") == mb["utility"].get("clusters")
    assert ma["utility"]["accuracy"] == pytest.approx(mb["utility"]["accuracy"], abs=0.01)
    sa, sb = PayloadStore.open(a / "payloads"), PayloadStore.open(b / "payloads")
    stored = [r["id"] for r in sa.records() if r["stored"]]
    assert stored and stored == [r["id"] for r in sb.records() if r["stored"]]
    for pid in stored:
        ta, tb = sa.load(pid).tensors, sb.load(pid).tensors
        assert ta is not None and tb is not None
        for name in ta:
            torch.testing.assert_close(ta[name], tb[name], atol=atol, rtol=0)


@pytest.mark.parametrize("fl", [pytest.param("genefl", marks=pytest.mark.slow), "fedavg",
                                pytest.param("cluster_fedavg", marks=pytest.mark.slow)])
def test_the_flower_engine_sends_what_the_inprocess_engine_sends(tmp_path, task_identity, fl):
    overrides = [f"fl={fl}", *SMALL, *(CLUSTERED if fl != "fedavg" else []), "attack=none", "capture.rounds=all",
                 "capture.clients=all", f"results_dir={tmp_path}"]
    run_audit(api.compose(overrides), tmp_path / "inprocess")
    grid = LoopbackGrid(5 if fl == "fedavg" else 7)  # known clients, then the agnostic ones
    run_audit(api.compose([*overrides, "engine=flower"]), tmp_path / "flower", launcher=FlowerGrid(grid))
    _same_run(tmp_path / "inprocess", tmp_path / "flower", atol=1e-6)
    kinds = {r["kind"] for r in _records(tmp_path / "flower")}
    assert kinds >= {"genefl": {"subspace", "cluster_model", "learngene", "gene_gradient", "gradient"},
                     "cluster_fedavg": {"subspace", "cluster_model", "update", "gradient"},
                     "fedavg": {"global_model", "update", "gradient"}}[fl]
    # hello to every node, 5 subspaces, 2 rounds of 3, and per agnostic client its subspace and its learnGene
    assert grid.sent == (5 + 2 * 3 if fl == "fedavg" else 7 + 5 + 2 * 3 + 2 * 2)
    if fl != "fedavg":
        ma, mb = (json.loads((tmp_path / r / "metrics.json").read_text()) for r in ("inprocess", "flower"))
        for key in ("agnostic_accuracy_learngene", "agnostic_accuracy_random", "agnostic_accuracy_cluster_model"):
            assert ma["utility"][key] == pytest.approx(mb["utility"][key], abs=1e-6)


@pytest.mark.slow  # 14 s (FedAvg) and 25 s; tests/test_dp_accounting.py checks the report's composition quickly
@pytest.mark.parametrize("fl", ["fedavg", "genefl"])
def test_dp_sgd_on_flower_reports_each_client_s_accounting_back_and_matches_inprocess(tmp_path, task_identity, fl):
    """Each ClientApp trains under its own DP-SGD accountant; the accounting it sends back with every reply makes
    the server's record of each client the in-process run's, epsilon for epsilon (GENE-FL: the Fisher and subspace
    reads covered too, the agnostic clients' DP-PCA included)."""
    overrides = [f"fl={fl}", *SMALL, *(CLUSTERED if fl == "genefl" else []), "attack=none", "defense=dpsgd",
                 "defense.target_epsilon=8", *(["defense.cover=[fisher_diagonal,subspace]"] if fl == "genefl" else []),
                 "capture.rounds=all", "capture.clients=all", f"results_dir={tmp_path}"]
    run_audit(api.compose(overrides), tmp_path / "inprocess")
    run_audit(api.compose([*overrides, "engine=flower"]), tmp_path / "flower",
              launcher=FlowerGrid(LoopbackGrid(5 if fl == "fedavg" else 7)))
    _same_run(tmp_path / "inprocess", tmp_path / "flower", atol=1e-6)
    da, db = (json.loads((tmp_path / r / "metrics.json").read_text())["defense"] for r in ("inprocess", "flower"))
    eps = da["epsilon_per_client"]
    assert set(eps) == set(db["epsilon_per_client"]) and len(eps) == (5 if fl == "fedavg" else 7)
    assert all(v > 0 for v in eps.values())  # every client released something under DP-SGD
    for client, value in eps.items():
        assert db["epsilon_per_client"][client] == pytest.approx(value, rel=1e-9)
    assert da["epsilon"] == pytest.approx(db["epsilon"], rel=1e-9)
    assert da["epsilon_covers_all_reads"] == db["epsilon_covers_all_reads"]
    assert da["reads"] == db["reads"]


def test_local_dp_fedavg_clips_as_flowers_local_dp_mod_and_noises_at_its_scale(task_identity) -> None:
    """Flower's LocalDpMod (clip, then Gaussian noise of std sensitivity sqrt(2 ln(1.25/delta)) / epsilon) and
    privbench's local release: the same clipped change, and the same noise scale once the mod's epsilon is set to
    give std z C (the mod's formula is the classical one, valid for epsilon < 1, and composes nothing)."""
    from flwr.app import Array
    from flwr.clientapp.mod import LocalDpMod

    from privbench.defenses.client_dp import DPFedAvg
    from privbench.defenses.client_dp.clipping import clip

    gen = torch.Generator().manual_seed(0)
    received = {"w": torch.randn(200_000, generator=gen)}
    sent = {"w": received["w"] + 0.01 * torch.randn(200_000, generator=gen)}  # a change of norm about 4.5
    z, c, delta = 0.8, 1.5, 1e-5

    def through_mod(sensitivity: float, epsilon: float) -> torch.Tensor:
        def inner(msg: Message, ctx: Context) -> Message:
            return Message(RecordDict({"arrays": ArrayRecord({"w": Array(sent["w"].numpy())})}), reply_to=msg)

        msg = Message(RecordDict({"arrays": ArrayRecord({"w": Array(received["w"].numpy())})}), dst_node_id=1,
                      message_type=MessageType.TRAIN)
        np.random.seed(1)
        out = LocalDpMod(c, sensitivity, epsilon, delta)(msg, Context(0, 0, {}, {}, RecordDict(), {}), inner)
        return torch.from_numpy(out.content["arrays"]["w"].numpy()) - received["w"]

    change = {"w": sent["w"] - received["w"]}
    clipped, norm = clip(change, c)
    assert norm > c
    torch.testing.assert_close(through_mod(0.0, 1.0), clipped["w"], atol=1e-6, rtol=0)  # sensitivity 0: no noise
    mech = DPFedAvg(mode="local", noise_multiplier=z, clip=c)
    mech.plan(rounds=1, participants=5, victim_round=0, uploads=["update"])
    flower_noise = through_mod(c, math.sqrt(2 * math.log(1.25 / delta)) / z) - clipped["w"]
    our_noise = mech.local_release(change, round_=0, who="client0")["w"] - clipped["w"]
    assert flower_noise.std().item() == pytest.approx(z * c, rel=0.01)
    assert our_noise.std().item() == pytest.approx(z * c, rel=0.01)


@pytest.mark.slow  # 13 s and 11 s; tests/test_client_dp.py checks the ClientApp's wire quickly
@pytest.mark.parametrize("mode", ["local", "central"])
def test_dp_fedavg_on_flower_sends_what_it_sends_in_process(tmp_path, task_identity, mode):
    """Client-level DP on the Flower engine: under local DP each ClientApp clips and noises its own upload (the
    recorded uploads are the in-process run's, noise and all); under central DP the server does, with canary
    clients beside them. Same bytes, same noise scale, same epsilon."""
    overrides = ["fl=fedavg", *SMALL, "attack=none", "aggregation=dpfedavg", f"aggregation.mode={mode}",
                 "aggregation.target_epsilon=8", "aggregation.clip=0.5", "capture.rounds=all", "capture.clients=all",
                 *(["aggregation.canary_clients=20"] if mode == "central" else []), f"results_dir={tmp_path}"]
    run_audit(api.compose(overrides), tmp_path / "inprocess")
    run_audit(api.compose([*overrides, "engine=flower"]), tmp_path / "flower", launcher=FlowerGrid(LoopbackGrid(5)))
    _same_run(tmp_path / "inprocess", tmp_path / "flower", atol=1e-6)
    da, db = (json.loads((tmp_path / r / "metrics.json").read_text())["defense"]["aggregation"]
              for r in ("inprocess", "flower"))
    assert db["noise_multiplier"] == da["noise_multiplier"] > 0
    assert db["client_epsilon"] == pytest.approx(da["client_epsilon"], rel=1e-12) and da["client_epsilon"] <= 8
    assert db["client_epsilon_per_client"] == pytest.approx(da["client_epsilon_per_client"], rel=1e-12)
    if mode == "central":
        assert db["canary_estimate"]["empirical_epsilon"] == pytest.approx(da["canary_estimate"]["empirical_epsilon"],
                                                                           rel=1e-9)
        assert db["canary_estimate"]["verdict"] == da["canary_estimate"]["verdict"]
    else:  # what the server recorded is the client's noisy release: its change is far from the clean one's norm
        store = PayloadStore.open(tmp_path / "flower" / "payloads")
        up = next(r for r in store.records() if r["kind"] == "update" and r["stored"])
        assert "local DP-FedAvg" in str(store.load(up["id"]).protection)


@pytest.mark.slow  # about 20 s (FedAvg) and 40 s (GENE-FL) on 2 cores
@pytest.mark.parametrize("fl,payload", [("fedavg", "update"), ("genefl", "learngene")])
def test_the_one_run_audit_runs_on_flower_traffic_and_matches_inprocess(tmp_path, task_identity, fl, payload):
    """The one-run DP audit reruns the victim's round from the download the capturing grid recorded; on Flower
    traffic it gives the in-process run's canary scores, lower bound and claim (the recorded tensors agree to
    1e-6)."""
    overrides = [f"fl={fl}", *SMALL, *(CLUSTERED if fl == "genefl" else []), f"payload={payload}", "defense=dpsgd",
                 "defense.target_epsilon=4", "attack=one_run", "attack.canaries=2000", "metrics.lpips=false",
                 f"results_dir={tmp_path}"]
    run_audit(api.compose(overrides), tmp_path / "inprocess")
    run_audit(api.compose([*overrides, "engine=flower"]), tmp_path / "flower",
              launcher=FlowerGrid(LoopbackGrid(5 if fl == "fedavg" else 7)))
    ma, mb = (json.loads((tmp_path / r / "metrics.json").read_text()) for r in ("inprocess", "flower"))
    ta, tb = (json.loads((tmp_path / r / "threat_model.json").read_text()) for r in ("inprocess", "flower"))
    assert tb["payload"] == ta["payload"] == f"r0001-{payload}-client0-server"
    assert tb["claimed_epsilon"] == pytest.approx(ta["claimed_epsilon"], rel=1e-12) and tb["sigma"] == ta["sigma"]
    assert mb["privacy"]["canaries"] == 2000 and mb["privacy"]["epsilon_lower_bound"] > 0
    for key in ("epsilon_lower_bound", "mia_auc", "canary_tpr_bound_1pct"):
        assert mb["privacy"][key] == pytest.approx(ma["privacy"][key], abs=1e-3), key
    sa, sb = (np.load(tmp_path / r / "membership.npz") for r in ("inprocess", "flower"))
    assert (sa["members"] == sb["members"]).all()
    np.testing.assert_allclose(sb["scores"], sa["scores"], atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("defense", ["prune", "topk"])
def test_a_message_transform_runs_on_the_client_and_matches_inprocess(tmp_path, task_identity, defense):
    """Also a compressed upload (topk): the server checks it decoded, and records it encoded, as in process."""
    overrides = [*SMALL, *CLUSTERED, "attack=none", f"defense={defense}", f"results_dir={tmp_path}"]
    run_audit(api.compose(overrides), tmp_path / "inprocess")
    run_audit(api.compose([*overrides, "engine=flower"]), tmp_path / "flower", launcher=FlowerGrid(LoopbackGrid(7)))
    _same_run(tmp_path / "inprocess", tmp_path / "flower", atol=1e-6)
    index = json.loads((tmp_path / "flower" / "payloads" / "index.json").read_text())
    assert {r["kind"] for r in index if r["protection"]} >= ({"learngene", "subspace"} if defense == "prune"
                                                             else {"learngene"})
    if defense == "topk":
        assert all(r["encoding"] == "sparse/change" for r in index if r["kind"] == "learngene")


@pytest.mark.slow
def test_flower_simulation_trains_the_same_run_and_its_learngene_is_attacked(tmp_path):
    """Ray-backed Flower simulation (ClientApps in other processes) vs in process, then iDLG on the capture."""
    overrides = ["fl=genefl", *SMALL, *CLUSTERED, "attack=idlg", "payload=learngene", "metrics.lpips=false",
                 f"results_dir={tmp_path}"]
    inproc = api.run(overrides, run_dir=tmp_path / "inprocess")
    flower = api.run([*overrides, "engine=flower"], run_dir=tmp_path / "flower")
    _same_run(inproc.run_dir, flower.run_dir, atol=1e-4)
    assert flower.metrics["threat_model"]["payload"] == "r0001-learngene-client0-server"
    attacked = flower.metrics["privacy"]
    assert attacked["psnr_gain"] > 10  # dB over what an attacker who learned nothing scores
    # L-BFGS amplifies the 1e-5 differences of the two runs' tensors (the ClientApps run on one thread) to about a dB
    # (54.4 vs 55.5 dB on the 2-core machine of 2026-12-01); both rebuild the image almost exactly
    assert min(attacked["psnr_mean"], inproc.metrics["privacy"]["psnr_mean"]) > 40


DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "flower"
LOOPBACK = ("data.num_clients=2 data.num_agnostic_clients=1 data.partition=iid fl.participants=2 fl.num_clusters=2 fl.rounds=2 fl.local_epochs=1 "
            "fl.agnostic.fedavg_reference=false metrics.lpips=false attack=idlg payload=learngene")


def _wait_for(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


@pytest.mark.slow
def test_a_tls_deployment_with_authenticated_nodes_is_captured_and_attacked(tmp_path):
    """The documented deployment: a SuperLink over TLS that admits only registered SuperNodes, three registered
    SuperNodes as processes, `flwr run`; an unregistered node is refused; capture at the server."""
    from privbench.flower.certificates import make_federation

    home, run = tmp_path / "flwr", tmp_path / "deployed"
    home.mkdir()
    certs = make_federation(tmp_path / "certs", nodes=4)  # nodes 0-2 registered, node 3 never
    env = {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    link, *nodes = free_ports(5)  # the SuperLink; two known clients, one agnostic client, the stranger
    (home / "config.toml").write_text(f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\n'
                                      f'address = "127.0.0.1:{link}"\nroot-certificates = "{certs.ca}"\n')
    log = (tmp_path / "processes.log").open("w")
    procs = []

    def supernode(i: int, port: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(["flower-supernode", "--root-certificates", str(certs.ca), "--superlink",
                                 f"127.0.0.1:{link}", "--auth-supernode-private-key", str(certs.node_keys[i]),
                                 "--port", str(port), "--node-config", f"partition-id={i % 3} num-partitions=3"],
                                env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    try:
        procs.append(subprocess.Popen(["flower-superlink", "--ssl-ca-certfile", str(certs.ca), "--ssl-certfile",
                                       str(certs.server_certificate), "--ssl-keyfile", str(certs.server_key),
                                       "--enable-supernode-auth", "--port", str(link),
                                       "--disable-runtime-dependency-installation"],
                                      env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        _wait_for(link, 60)
        for key in certs.node_public_keys[:3]:
            registered = subprocess.run(["flwr", "supernode", "register", str(key), "loopback"], env=env,
                                        cwd=tmp_path, capture_output=True, text=True, timeout=60)
            assert "registered successfully" in registered.stdout, registered.stdout + registered.stderr
        stranger = supernode(3, nodes[3])
        procs.append(stranger)
        assert stranger.wait(timeout=120) != 0  # a node whose key was not registered cannot join
        procs.extend(supernode(i, port) for i, port in enumerate(nodes[:3]))
        done = subprocess.run(["flwr", "run", str(DEPLOY), "loopback", "--stream", "--run-config",
                               f"overrides='{LOOPBACK}' run-dir='{run}'"],
                              env=env, cwd=tmp_path, capture_output=True, text=True, timeout=420)
        assert (run / "metrics.json").is_file(), done.stdout[-4000:] + done.stderr[-2000:]
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            p.wait(timeout=30)
        log.close()
    assert "Failed to activate SuperNode" in (tmp_path / "processes.log").read_text()
    inproc = api.run([*LOOPBACK.split(), f"results_dir={tmp_path}"],
                     run_dir=tmp_path / "inprocess")
    _same_run(inproc.run_dir, run, atol=1e-4)
    deployed = json.loads((run / "metrics.json").read_text())
    assert deployed["threat_model"]["payload"] == "r0000-learngene-client0-server"
    assert deployed["privacy"]["psnr_gain"] > 10


def test_a_clientapp_refuses_a_config_that_names_a_foreign_target(monkeypatch):
    from omegaconf import OmegaConf

    from privbench.flower.client_app import ClientSession

    cfg = api.compose([*SMALL, *CLUSTERED, "engine=flower"])
    hostile = OmegaConf.to_container(cfg, resolve=True)
    hostile["victim"]["clients"] = {"_target_": "builtins.open", "file": "/tmp/pb-hostile", "mode": "w"}
    with pytest.raises(ConfigError, match=r"victim.clients._target_='builtins.open': the received config names"):
        ClientSession.build(OmegaConf.to_yaml(OmegaConf.create(hostile)))
    hostile["victim"]["clients"] = None
    hostile["allow_targets"] = ["builtins"]  # the sender's own allowance is not trusted
    hostile["attack"]["_target_"] = "builtins.print"
    with pytest.raises(ConfigError, match="attack._target_='builtins.print'"):
        ClientSession.build(OmegaConf.to_yaml(OmegaConf.create(hostile)))
    assert not Path("/tmp/pb-hostile").exists()


class HostileGrid(LoopbackGrid):
    """Client 1's round-0 reply is changed by ``tamper(fields, payloads)`` on its way back."""

    def __init__(self, num_clients: int, tamper) -> None:  # type: ignore[no-untyped-def]
        super().__init__(num_clients)
        self.tamper = tamper

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        replies = []
        for m, reply in zip(messages := list(messages), super().send_and_receive(messages, timeout=timeout)):
            fields = dict(reply.content.config_records["privbench"]) if "privbench" in reply.content else {}
            sent = payloads_in(reply.content)
            if m.metadata.message_type == MessageType.TRAIN and fields.get("num_samples") is not None \
                    and any(p.sender == "client1" and p.kind == "learngene" for p in sent):
                fields, sent = self.tamper(fields, sent)
                content = RecordDict({"privbench": ConfigRecord(fields)})
                put_payloads(content, sent)
                reply = Message(content, reply_to=m)
            replies.append(reply)
        return replies


def _gene(sent: list[Payload], change) -> list[Payload]:  # type: ignore[no-untyped-def]
    return [p.with_tensors(change(dict(p.tensors))) if p.kind == "learngene" else p for p in sent]


def _first_nan(tensors: dict) -> dict:  # type: ignore[type-arg]
    name = next(iter(tensors))
    bad = tensors[name].clone()
    bad.view(-1)[0] = float("nan")
    return {**tensors, name: bad}


@pytest.mark.parametrize("tamper, message", [
    pytest.param(lambda f, s: (f, _gene(s, _first_nan)), "holds NaN or infinite values", marks=pytest.mark.slow),
    pytest.param(lambda f, s: (f, _gene(s, lambda t: {**t, next(iter(t)): torch.zeros(1)})),
                 r"is float32 \[1\], the model's is", marks=pytest.mark.slow),
    pytest.param(lambda f, s: ({**f, "num_samples": 10**12}, s), "claims num_samples=1000000000000; the server planned",
                 marks=pytest.mark.slow),
    pytest.param(lambda f, s: ({**f, "num_samples": -50}, s), "claims num_samples=-50", marks=pytest.mark.slow),
    (lambda f, s: (f, [dataclasses.replace(p, sender="client3") for p in s]), "only uploads from client1"),
    pytest.param(lambda f, s: ({k: v for k, v in f.items() if k != REPORT}, s), "it sent no record of the reads",
                 marks=pytest.mark.slow),
    pytest.param(lambda f, s: ({**f, REPORT: json.dumps({"reads": ["local_sgd", "labels_of_everyone"]})}, s),
                 "it reports a read 'labels_of_everyone'", marks=pytest.mark.slow),
    pytest.param(lambda f, s: (f, _gene(s, lambda t: {**t, "body.0.weight": t[next(iter(t))].long()})),
                 "not a floating tensor", marks=pytest.mark.slow),
    # the client's word against the server's plan (issue 45): its training record, layer list, every tensor
    pytest.param(lambda f, s: (f, _trained(s, lr=1e-6)), "declares lr=1e-06; the server planned 0.1",
                 marks=pytest.mark.slow),
    pytest.param(lambda f, s: (f, _trained(s, steps=1)), "declares steps=1; the server planned",
                 marks=pytest.mark.slow),
    pytest.param(lambda f, s: ({**f, "layers": json.dumps(["no.such.layer"])}, s),
                 r"it names layers \['no.such.layer'\]", marks=pytest.mark.slow),
    pytest.param(lambda f, s: (f, _gene(s, lambda t: dict(list(t.items())[1:]))),
                 "lacks .*, which the server expects of a learngene", marks=pytest.mark.slow),
])
def test_a_hostile_reply_ends_the_run_naming_the_client_and_nothing_of_it_is_recorded(tmp_path, task_identity,
                                                                                        tamper, message):
    cfg = api.compose([*SMALL, *CLUSTERED, "engine=flower", "attack=none", "victim.round=0", "capture.rounds=all",
                       "capture.clients=all", f"results_dir={tmp_path}"])
    with pytest.raises(FlowerClientError, match=rf"client1 \(node 101\) sent a reply the server refuses: .*{message}"):
        run_audit(cfg, tmp_path / "run", launcher=FlowerGrid(HostileGrid(7, tamper)))
    payloads = tmp_path / "run" / "payloads"
    index = json.loads((payloads / "index.json").read_text()) if (payloads / "index.json").exists() else []
    refused_round = 1 + max([r["round"] for r in index if r["kind"] == "learngene"], default=-1)
    # the refused batch of replies left nothing: no upload of that round in the index or as a file
    assert not [r for r in index if r["direction"] == "up" and r["round"] >= refused_round and r["phase"] == "training"
                and r["kind"] != "subspace"]
    assert not list(payloads.glob(f"r{refused_round:04d}-*-client*-server.safetensors"))


def _trained(sent: list[Payload], **changes) -> list[Payload]:  # type: ignore[no-untyped-def]
    return [dataclasses.replace(p, training=dataclasses.replace(p.training, **changes)) if p.kind == "learngene" else p
            for p in sent]


def _changed_events(fields: dict, sent: list, change) -> tuple:  # type: ignore[no-untyped-def, type-arg]
    report = json.loads(fields[REPORT])
    report["events"] = [change(*event) for event in report["events"]]
    return {**fields, REPORT: json.dumps(report)}, sent


def _under_reported(fields: dict, sent: list) -> tuple:  # type: ignore[type-arg]
    return _changed_events(fields, sent, lambda sigma, rate, steps: [10 * sigma, rate, steps])


@pytest.mark.slow  # 12 s a case; tests/test_dp_accounting.py checks each refusal in process
@pytest.mark.parametrize("tamper, message", [
    (_under_reported, "it reports noise multiplier .*; the server planned .* for client1"),
    (lambda f, s: ({**f, REPORT: json.dumps({"reads": json.loads(f[REPORT])["reads"]})}, s),
     "its record of reads carries no list of DP-SGD accountant events"),
    (lambda f, s: _changed_events(f, s, lambda sigma, rate, steps: [sigma, 2.0, steps]),
     "an accountant event has sample rate 2 and"),
    # fewer steps, a tiny sample rate, no events: each a smaller epsilon than the server planned (issue 45)
    (lambda f, s: _changed_events(f, s, lambda sigma, rate, steps: [sigma, rate, max(steps - 1, 1)] if rate < 1 else
                                  [sigma, rate, steps]), "it reports accountant events of .*; the server planned"),
    (lambda f, s: _changed_events(f, s, lambda sigma, rate, steps: [sigma, 1e-6, steps]),
     "it reports accountant events of .* at rate 1e-06; the server planned"),
    (lambda f, s: ({**f, REPORT: json.dumps({**json.loads(f[REPORT]), "events": []})}, s),
     "it reports accountant events of no steps; the server planned"),
])
def test_a_client_that_misreports_its_dp_accounting_ends_the_run(tmp_path, task_identity, tamper, message):
    """A client that claims more noise than the server planned for it (so a smaller epsilon) is refused."""
    cfg = api.compose([*SMALL, *CLUSTERED, "engine=flower", "attack=none", "victim.round=0", "defense=dpsgd",
                       "defense.target_epsilon=8", f"results_dir={tmp_path}"])
    with pytest.raises(FlowerClientError, match=rf"client1 \(node 101\) sent a reply the server refuses: {message}"):
        run_audit(cfg, tmp_path / "run", launcher=FlowerGrid(HostileGrid(7, tamper)))


def test_two_nodes_claiming_one_partition_are_refused_by_name(tmp_path, task_identity):
    grid = LoopbackGrid(7)
    grid.contexts[107] = Context(run_id=1, node_id=107, node_config={"partition-id": 2, "num-partitions": 7},
                                 state=RecordDict(), run_config={})
    cfg = api.compose([*SMALL, *CLUSTERED, "engine=flower", "attack=none", f"results_dir={tmp_path}"])
    with pytest.raises(FlowerClientError, match="nodes 102 and 107 both claim partition 2"):
        run_audit(cfg, tmp_path / "run", launcher=FlowerGrid(grid))


def test_federation_certificates_chain_to_their_ca_and_node_keys_pair_up(tmp_path, capsys):
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from privbench.flower.certificates import main, make_federation

    made = make_federation(tmp_path / "certs", nodes=2, hosts=("127.0.0.1", "link.example"))
    ca = x509.load_pem_x509_certificate(made.ca.read_bytes())
    server = x509.load_pem_x509_certificate(made.server_certificate.read_bytes())
    ca.public_key().verify(server.signature, server.tbs_certificate_bytes, ec.ECDSA(hashes.SHA384()))  # signed by it
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(x509.DNSName) == ["link.example"]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not (tmp_path / "certs" / "ca.key").exists()  # the CA signs nothing after the command
    server_key = serialization.load_pem_private_key(made.server_key.read_bytes(), None)
    assert server_key.public_key().public_numbers() == server.public_key().public_numbers()
    for private, public in zip(made.node_keys, made.node_public_keys):
        key = serialization.load_ssh_private_key(private.read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp384r1"
        assert serialization.load_ssh_public_key(public.read_bytes()).public_numbers() == \
            key.public_key().public_numbers()
        assert private.stat().st_mode & 0o777 == 0o600
    assert made.server_key.stat().st_mode & 0o777 == 0o600
    first, second = (serialization.load_ssh_private_key(k.read_bytes(), None) for k in made.node_keys)
    assert first.private_numbers() != second.private_numbers()  # one key pair per node
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "certs"), "--nodes", "2"])
    assert exit_.value.code == 2 and "already exists" in capsys.readouterr().err


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_secagg_on_flower_runs_flowers_own_workflow_and_gives_the_inprocess_aggregate(tmp_path, task_identity):
    """aggregation=secagg on the Flower engine: Flower's SecAggPlusWorkflow and secaggplus_mod, every stage recorded;
    the same messages per stage as in process, no upload stored, the same aggregate within quantisation."""
    overrides = ["fl=fedavg", *SMALL, "aggregation=secagg", "attack=none", "capture.rounds=all", "capture.clients=all",
                 f"results_dir={tmp_path}"]
    run_audit(api.compose(overrides), tmp_path / "inprocess")
    run_audit(api.compose([*overrides, "engine=flower"]), tmp_path / "flower", launcher=FlowerGrid(LoopbackGrid(5)))
    ids = {r: sorted(x["id"] for x in _records(tmp_path / r)) for r in ("inprocess", "flower")}
    assert ids["inprocess"] == ids["flower"]
    kinds = {x.split("-")[1] for x in ids["flower"]}
    assert not kinds & {"update", "gradient"} and {"masked_upload", "aggregate", "secagg_key_shares"} <= kinds
    sa, sb = (PayloadStore.open(tmp_path / r / "payloads") for r in ("inprocess", "flower"))
    for round_ in (0, 1):  # one quantisation level (3.8e-6) per client over weights of about 0.6, and round 0's drift
        a, b = (s.load(f"r{round_:04d}-aggregate-cohort0-server") for s in (sa, sb))
        assert a.names == b.names
        assert all(torch.allclose(a.tensors[n], b.tensors[n], atol=3e-5) for n in a.names)
    elements = sum(t.numel() for t in sa.load("r0000-aggregate-cohort0-server").tensors.values())
    masked = {s: s.load("r0001-masked_upload-client0-server").nbytes for s in (sa, sb)}
    assert masked[sa] == 4 * (elements + 8)  # privbench's: 4 bytes a coordinate and a weight per tensor
    assert masked[sb] > 8 * elements  # Flower's: int64 arrays, serialised with their headers
    ma, mb = (json.loads((tmp_path / r / "metrics.json").read_text()) for r in ("inprocess", "flower"))
    assert mb["run"]["aggregation"] == "secagg" and mb["bytes"]["uplink_bytes"] > ma["bytes"]["uplink_bytes"]


@pytest.mark.slow  # 5 s; tests/test_client_dp.py covers the in-process path quickly
def test_dp_fedavg_over_secagg_on_flower_clips_on_the_node_and_releases_the_inprocess_model(tmp_path, task_identity):
    """aggregation=dpfedavg_secagg on Flower: each ClientApp clips before Flower's SecAgg+ mod masks its upload
    (weight 1), the server noises the unmasked sum as in process: the same messages, the same aggregates and the same
    released models within quantisation, and the same epsilon."""
    overrides = ["fl=fedavg", *SMALL, "aggregation=dpfedavg_secagg", "aggregation.noise_multiplier=1.0",
                 "aggregation.clip=0.5", "attack=none", "capture.rounds=all", "capture.clients=all",
                 f"results_dir={tmp_path}"]
    run_audit(api.compose(overrides), tmp_path / "inprocess")
    run_audit(api.compose([*overrides, "engine=flower"]), tmp_path / "flower", launcher=FlowerGrid(LoopbackGrid(5)))
    ids = {r: sorted(x["id"] for x in _records(tmp_path / r)) for r in ("inprocess", "flower")}
    assert ids["inprocess"] == ids["flower"]
    sa, sb = (PayloadStore.open(tmp_path / r / "payloads") for r in ("inprocess", "flower"))
    for round_ in (0, 1):
        a, b = (s.load(f"r{round_:04d}-aggregate-cohort0-server") for s in (sa, sb))
        assert all(torch.allclose(a.tensors[n], b.tensors[n], atol=3e-5) for n in a.names)
    a, b = (s.load("r0001-global_model-server-client0") for s in (sa, sb))  # round 0's noisy release
    assert all(torch.allclose(a.tensors[n], b.tensors[n], atol=3e-5) for n in a.names)
    da, db = (json.loads((tmp_path / r / "metrics.json").read_text())["defense"]["aggregation"]
              for r in ("inprocess", "flower"))
    assert db["client_epsilon"] == pytest.approx(da["client_epsilon"], rel=1e-12)
    assert db["client_epsilon_per_client"] == da["client_epsilon_per_client"]


@pytest.mark.slow
def test_flower_simulation_runs_secagg_with_clientapps_in_other_processes(tmp_path):
    """SecAgg+ on Flower's Ray simulation (every stage's message serialised between processes): the same messages
    and the same aggregate as in process, within quantisation."""
    overrides = ["fl=fedavg", *SMALL, "aggregation=secagg", "attack=none", "capture.rounds=all",
                 "capture.clients=all", f"results_dir={tmp_path}"]
    api.run(overrides, run_dir=tmp_path / "inprocess")
    api.run([*overrides, "engine=flower"], run_dir=tmp_path / "flower")
    ids = {r: sorted(x["id"] for x in _records(tmp_path / r)) for r in ("inprocess", "flower")}
    assert ids["inprocess"] == ids["flower"] and not any("-update-" in i for i in ids["flower"])
    sa, sb = (PayloadStore.open(tmp_path / r / "payloads") for r in ("inprocess", "flower"))
    a, b = (s.load("r0001-aggregate-cohort0-server") for s in (sa, sb))
    assert all(torch.allclose(a.tensors[n], b.tensors[n], atol=3e-5) for n in a.names)


class ForgedSecAggGrid(LoopbackGrid):
    """Client 1's masked upload under SecAgg+ declares the clear fields ``change`` gives it."""

    def __init__(self, num_clients: int, change) -> None:  # type: ignore[no-untyped-def]
        super().__init__(num_clients)
        self.change = change

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        from privbench.flower.secagg import FIELDS

        replies = super().send_and_receive(messages, timeout=timeout)
        for reply in replies:
            if int(reply.metadata.src_node_id) == 101 and "fitres.metrics" in reply.content.config_records:
                metrics = reply.content.config_records["fitres.metrics"]
                metrics[FIELDS] = json.dumps(self.change(json.loads(str(metrics[FIELDS]))))
        return replies


@pytest.mark.parametrize("change, message", [
    (lambda f: {**f, "num_samples": 10**6}, "it claims num_samples=1000000; the server planned"),
    pytest.param(lambda f: {**f, "layers": json.dumps(["no.such.layer"])}, r"it names layers \['no.such.layer'\]",
                 marks=pytest.mark.slow),
    pytest.param(lambda f: {**f, "training": json.dumps({**json.loads(f["training"]), "lr": 1e-6})},
                 r"its round-\d upload declares lr=1e-06; the server planned 0.1", marks=pytest.mark.slow),
])
def test_a_forged_clear_field_of_a_masked_upload_is_refused_before_it_is_recorded(tmp_path, task_identity, change,
                                                                                 message):
    """Under SecAgg+ on Flower the server cannot read an upload, but it checks what the reply says in the clear (its
    sample count, layers and training record) against its plan before anything of it enters the cohort's record."""
    cfg = api.compose(["fl=fedavg", *SMALL, "aggregation=secagg", "attack=none", "victim.client=0",
                       f"results_dir={tmp_path}"])
    with pytest.raises(FlowerClientError, match=rf"client1 \(node 101\) sent a reply the server refuses: {message}"):
        run_audit(cfg, tmp_path / "run", launcher=FlowerGrid(ForgedSecAggGrid(5, change)))
    index = tmp_path / "run" / "payloads" / "index.json"
    recorded = json.loads(index.read_text()) if index.exists() else []
    assert not [r for r in recorded if r["kind"] in ("masked_upload", "aggregate") and r["sender"] == "client1"]
