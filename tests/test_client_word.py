"""The server checks a client's word against its own plan (issue 45, items 2 and 6): training records, sample
counts, layer lists and every expected tensor in process; SecAgg+ settings against the modulus and the cohort with
Flower's threshold semantics. Flower's side of each forgery is in tests/test_flower.py."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from privbench import api
from privbench.audit.plan import plan, prepare
from privbench.audit.run import run_audit
from privbench.defenses.secure_aggregation import SecAggPlus
from privbench.errors import ConfigError, PrivbenchError
from privbench.fl.engine import TaskReply
from privbench.fl.protocols.fedavg import FedAvg
from privbench.fl.protocols.round import Upload

SMALL = ["fl=fedavg", "data.num_clients=5", "fl.rounds=1", "fl.participants=3", "fl.local_epochs=1",
         "victim.round=0", "attack=none"]


def _forge(change):  # type: ignore[no-untyped-def]
    """FedAvg's client side, its upload changed by ``change(upload)`` before the server reads it."""
    honest = FedAvg.end_round

    def end_round(self, pending, training, state):  # type: ignore[no-untyped-def]
        upload = honest(self, pending, training, state)
        return change(upload) if not pending.at.is_victim else upload
    return end_round


def _training(upload: Upload, **changes: object) -> Upload:
    assert upload.payload.training is not None
    return dataclasses.replace(upload, payload=dataclasses.replace(
        upload.payload, training=dataclasses.replace(upload.payload.training, **changes)))


def _without_first_tensor(upload: Upload) -> Upload:
    tensors = dict(upload.tensors)
    tensors.pop(next(iter(tensors)))
    return dataclasses.replace(upload, payload=upload.payload.with_tensors(tensors))


@pytest.mark.parametrize("change, message", [
    (lambda u: dataclasses.replace(u, num_samples=10**6), "it claims num_samples=1000000; the server planned"),
    (lambda u: _training(u, lr=1e-6), "declares lr=1e-06; the server planned 0"),
    pytest.param(lambda u: _training(u, steps=1), "declares steps=1; the server planned", marks=pytest.mark.slow),
    pytest.param(lambda u: _training(u, batch_size=1), "declares batch_size=1; the server planned", marks=pytest.mark.slow),
    pytest.param(lambda u: _training(u, epochs=9), "declares epochs=9; the server planned 1", marks=pytest.mark.slow),
    pytest.param(lambda u: dataclasses.replace(u, payload=dataclasses.replace(u.payload, training=None)),
                 "carries no training record", marks=pytest.mark.slow),
    (_without_first_tensor, "lacks .*, which the server expects of a update"),
    pytest.param(lambda u: dataclasses.replace(u, layers=["no.such.layer"]), r"it names layers \['no.such.layer'\]",
                 marks=pytest.mark.slow),
])
def test_a_forged_reply_in_process_is_refused_naming_the_client(tmp_path, monkeypatch, change, message):
    """In process too, the server reads a reply only after checking it against its plan: a forged field ends the run
    in one line naming the client."""
    monkeypatch.setattr(FedAvg, "end_round", _forge(change))
    with pytest.raises(PrivbenchError, match=rf"^client[1-4] sent a reply the server refuses: .*{message}"):
        run_audit(api.compose([*SMALL, "victim.client=0", f"results_dir={tmp_path}"]), tmp_path / "run")


def test_the_honest_reply_in_process_passes_every_check(tmp_path):
    run_audit(api.compose([*SMALL, f"results_dir={tmp_path}"]), tmp_path / "run")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert 0 <= metrics["utility"]["accuracy"] <= 1


def test_a_round_reply_naming_no_upload_is_refused_in_process():
    p = plan(api.compose(SMALL))
    with pytest.raises(ValueError, match="its reply names no model upload"):
        from privbench.fl.engine import ClientSide, ClientTask
        from privbench.fl.sgd import parameters_of

        data, model, _ = prepare(p)
        side = ClientSide(model, data, None, None, p.seed, p.victim, parameters_of(model))  # type: ignore[arg-type]
        p.protocol.check_reply(ClientTask("round", 1, 0), TaskReply({"num_samples": 3}), [], side)


# -- SecAgg+ settings: against the modulus, the cohort and Flower's semantics --------------------------------------

def _flower_threshold(num_shares: int | float, threshold: int | float, n: int) -> tuple[int, int]:
    """Flower 1.42's own reading of the settings for a cohort of ``n`` (its workflow's setup stage, restated)."""
    from flwr.server.workflow import SecAggPlusWorkflow

    wf = SecAggPlusWorkflow(num_shares=num_shares, reconstruction_threshold=threshold)  # normalises 1 to 1.0
    if isinstance(wf.num_shares, float):
        shares = round(wf.num_shares * n)
        shares = shares + 1 if shares < n and shares % 2 == 0 else shares
        shares = n if shares <= 2 else shares
    else:
        shares = wf.num_shares
    t = max(round(wf.reconstruction_threshold * shares), 2) if isinstance(wf.reconstruction_threshold, float) \
        else wf.reconstruction_threshold
    return min(2 * (shares // 2) + 1, n), t


@pytest.mark.parametrize("num_shares, threshold, n", [(1.0, 1, 5), (1, 1, 4), (1.0, 0.5, 6), (5, 3, 9), (1.0, 3, 5),
                                                        (0.5, 0.6, 10)])
def test_secagg_reads_num_shares_and_the_threshold_as_flower_does(num_shares, threshold, n):
    """An integer threshold of 1 is every share (Flower's reading), never a single share."""
    assert SecAggPlus(num_shares=num_shares, reconstruction_threshold=threshold).sizes(n) == \
        _flower_threshold(num_shares, threshold, n)
    if threshold == 1:
        assert SecAggPlus(num_shares=num_shares, reconstruction_threshold=threshold).sizes(n)[1] == n


@pytest.mark.parametrize("overrides, message", [
    (["aggregation.quantization_range=2147483648"], "a cohort of 3 clients sums up to 3 x 2147483648, which overflows "
                                                    "modulus_range=4294967296"),
    (["aggregation.modulus_range=8388608"], "overflows modulus_range=8388608"),
    (["aggregation.max_weight=2"], "aggregation.max_weight=2: a cohort of 3 clients weighs 3600 samples, 1.8e"),
    (["aggregation.reconstruction_threshold=4"], "4 shares for a cohort of 3"),
    (["fl=cluster_fedavg", "fl.num_clusters=2", "fl.agnostic.fedavg_reference=false", "fl.agnostic.epochs=0",
      "aggregation.num_shares=1.0", "aggregation.reconstruction_threshold=3"], "3 shares for a cohort of 2"),
    (["aggregation.num_shares=2000"], "above modulus_range / quantization_range = 1024"),
])
def test_secagg_settings_that_break_it_are_refused_before_training(tmp_path, overrides, message):
    cfg = api.compose([*SMALL, "aggregation=secagg", *overrides, f"results_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=message):
        prepare(plan(cfg))  # data and settings checked, nothing trained


def test_valid_secagg_settings_still_plan_and_match_flower():
    cfg = api.compose([*SMALL, "aggregation=secagg", "aggregation.reconstruction_threshold=2",
                       "aggregation.quantization_range=1048576", "aggregation.modulus_range=4194304"])
    p = plan(cfg)
    prepare(p)
    aggregation = p.protocol.aggregation
    assert isinstance(aggregation, SecAggPlus) and aggregation.sizes(3) == _flower_threshold(1.0, 2, 3)


def test_secagg_in_process_sums_below_the_modulus_give_the_plain_mean(tmp_path):
    """At the bound (cohort x quantization_range just below the modulus) the aggregate is still the plain mean."""
    from privbench.fl.trainer import SGDTrainer
    from privbench.fl.wire import Wire
    from privbench.payloads import CapturePolicy, LocalTraining, Payload, PayloadStore

    agg = SecAggPlus(quantization_range=2**20, modulus_range=2**22, clipping_range=2.0, max_weight=10)
    agg.check_cohorts([3], weights=[10, 10, 10])
    base = {"w": torch.zeros(4)}
    wire = Wire(PayloadStore(tmp_path), CapturePolicy.build(kinds="all", rounds="all", clients="all", victim_round=0, victim_client=0), sends=(*agg.sends, "update"),
                trainer=SGDTrainer())
    training = LocalTraining(lr=0.1, steps=1, batch_size=1, num_samples=10)
    ups = [Upload(10, Payload.from_tensors(kind="update", round=0, sender=f"client{i}", receiver="server",
                                           tensors={"w": torch.full((4,), 0.5 * i)}, training=training), [])
           for i in range(3)]
    out = agg.combine(base, ups, round_=0, group=None, wire=wire, seed=0)
    torch.testing.assert_close(out["w"], torch.full((4,), 0.5), atol=1e-4, rtol=0)
