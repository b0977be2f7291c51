"""Byte counts, the payload store round trip, the capture policy and aggregation."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from privbench.errors import ConfigError, StoreError
from privbench.fl.aggregate import aggregate
from privbench.fl.trainer import SGDTrainer
from privbench.fl.wire import Wire, WireError
from privbench.models import LeNet
from privbench.payloads import CapturePolicy, LocalTraining, Payload, PayloadStore, tensor_bytes
from privbench.payloads.transform import MessageTransform


def test_bytes_of_known_tensors():
    tensors = {"a": torch.zeros(3, 5), "b": torch.zeros(7, dtype=torch.float64), "c": torch.zeros(2, 2, dtype=torch.int8)}
    assert tensor_bytes(tensors) == 15 * 4 + 7 * 8 + 4 * 1


def test_lenet_payload_bytes_by_hand():
    # conv1 1*12*25+12, conv2/conv3 12*12*25+12, fc (12*7*7)*10+10, float32
    expected = (312 + 3612 + 3612 + 5890) * 4
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    p = Payload.from_tensors(kind="update", round=0, sender="client0", receiver="server", tensors=model.state_dict())
    assert p.nbytes == expected == 53704 and p.numel == expected // 4
    assert p.names == ["body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias", "body.4.weight", "body.4.bias",
                       "fc.weight", "fc.bias"]


def test_store_round_trip(tmp_path):
    tensors = {"w": torch.randn(4, 3), "b": torch.arange(3.0)}
    sent = Payload.from_tensors(kind="gradient", round=2, sender="client1", receiver="server", tensors=tensors,
                                base="r0002-global_model-server-client1",
                                training=LocalTraining(lr=0.1, steps=1, batch_size=2, num_samples=2))
    counted = Payload.from_tensors(kind="update", round=2, sender="client2", receiver="server", tensors=tensors)
    store = PayloadStore(tmp_path / "p")
    store.add(sent, keep=True, truth=[5, 9])
    store.add(counted, keep=False)
    store.flush()
    reopened = PayloadStore.open(tmp_path / "p")
    loaded = reopened.load(sent.id)
    assert loaded.names == ["w", "b"] and loaded.training == sent.training and reopened.truth(sent.id) == [5, 9]
    assert "truth" not in loaded.record() and reopened.truth(counted.id) == []  # the store's, not the message's
    assert all(torch.equal(loaded.tensors[n], tensors[n]) for n in tensors)
    assert loaded.nbytes == 4 * 15
    index = json.loads((tmp_path / "p" / "index.json").read_text())
    assert [r["stored"] for r in index] == [True, False] and index[1]["nbytes"] == 60
    with pytest.raises(StoreError, match="not kept"):
        reopened.load(counted.id)
    assert not list((tmp_path / "p").glob("*.tmp"))


def test_capture_policy_keeps_victim_round_only():
    policy = CapturePolicy.build(victim_round=1, victim_client=3)
    mk = lambda kind, r, s, d: Payload.from_tensors(kind=kind, round=r, sender=s, receiver=d, tensors={})  # noqa: E731
    assert policy.keeps(mk("update", 1, "client3", "server"))
    assert policy.keeps(mk("global_model", 1, "server", "client3"))
    assert not policy.keeps(mk("update", 1, "client2", "server"))
    assert not policy.keeps(mk("update", 0, "client3", "server"))
    only = CapturePolicy.build(kinds=["gradient"], rounds="all", clients="all", victim_round=1, victim_client=3)
    assert only.keeps(mk("gradient", 5, "client0", "server")) and not only.keeps(mk("update", 1, "client3", "server"))
    with pytest.raises(ConfigError, match="unknown"):
        CapturePolicy.build(kinds=["weights"], victim_round=0, victim_client=0)


def test_aggregate_weights_by_samples_and_keeps_unsent_layers():
    base = {"a": torch.zeros(2), "b": torch.ones(2), "c": torch.full((2,), 7.0)}
    uploads = [(1, {"a": torch.ones(2), "b": torch.full((2,), 3.0)}), (3, {"a": torch.full((2,), 5.0)})]
    out = aggregate(base, uploads)
    assert torch.allclose(out["a"], torch.full((2,), (1 * 1 + 3 * 5) / 4))
    assert torch.allclose(out["b"], torch.full((2,), 3.0))  # only one client sent b
    assert torch.equal(out["c"], base["c"])  # nobody sent c


class _Half(MessageTransform):
    """Sends every uplink tensor in float16: half the bytes."""

    name = "half"

    def protect(self, payload: Payload, base: dict[str, torch.Tensor] | None = None) -> Payload:
        assert payload.tensors is not None
        return payload.with_tensors({n: t.half() for n, t in payload.tensors.items()}, protection="float16")

    def describe(self) -> dict[str, str]:
        return {"defense": self.name}


class _Stale(_Half):
    """Changes the tensors but keeps the old byte count (what ``dataclasses.replace`` would do)."""

    def protect(self, payload: Payload, base: dict[str, torch.Tensor] | None = None) -> Payload:
        assert payload.tensors is not None
        return dataclasses.replace(payload, tensors={n: t.half() for n, t in payload.tensors.items()})


def _gradient() -> tuple[Payload, SGDTrainer]:
    trainer = SGDTrainer()
    model = torch.nn.Linear(3, 2)
    grad, record = trainer.gradient(model, torch.randn(4, 3), torch.tensor([0, 1, 0, 1]), client="client0", lr=0.1,
                                    generator=torch.Generator().manual_seed(0))
    return Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server", tensors=grad,
                                training=record), trainer


def test_bytes_follow_the_tensors_a_transform_sends(tmp_path):
    payload, trainer = _gradient()
    assert payload.nbytes == (2 * 3 + 2) * 4  # weight and bias in float32
    wire = Wire(PayloadStore(tmp_path / "p"), CapturePolicy(kinds="all", rounds="all", clients="all"),
                sends=("gradient",), trainer=trainer, transform=_Half())
    sent = wire.send(payload)
    assert sent.nbytes == (2 * 3 + 2) * 2 and sent.dtypes == {"weight": "float16", "bias": "float16"}
    assert payload.spec.audit_only and not wire.bytes  # the audit gradient is not protocol traffic
    wire.store.flush()
    assert PayloadStore.open(tmp_path / "p").load(sent.id).nbytes == 16  # the store checks the recounted figure


def test_a_transform_that_does_not_recount_is_refused(tmp_path):
    payload, trainer = _gradient()
    wire = Wire(PayloadStore(tmp_path / "p"), CapturePolicy(kinds="all", rounds="all", clients="all"),
                sends=("gradient",), trainer=trainer, transform=_Stale())
    with pytest.raises(WireError, match="defense=half: .*declares 32 bytes .* carries 16"):
        wire.send(payload)
    stale = dataclasses.replace(payload, nbytes=1)
    with pytest.raises(StoreError, match="declares 1 bytes"):
        PayloadStore(tmp_path / "q").add(stale, keep=True)
