"""FedAvg on the wire: every message recorded, exact bytes, the victim's gradient, determinism."""
from __future__ import annotations

import pytest
import torch

from privbench.fl.protocols.fedavg import FedAvg
from privbench.fl.sgd import batch_gradient
from privbench.fl.wire import Wire
from privbench.models import LeNet
from privbench.payloads import CapturePolicy, PayloadStore
from privbench.victim import Victim

MODEL_BYTES = 53704  # LeNet, 1x28x28, 10 classes, float32 (see test_payloads)


def _run(tmp_path, fmnist, seed=0):
    victim = Victim(client=3, round=1, num_images=2)
    torch.manual_seed(seed)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    protocol = FedAvg(rounds=2, participants=3, local_epochs=1, lr=0.1, batch_size=64)
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path), CapturePolicy.build(victim_round=1, victim_client=3))
    result = protocol.run(model=model, data=fmnist, victim=victim, wire=wire, seed=seed)
    return protocol, result, wire, init


def test_every_message_counted_with_exact_bytes(tmp_path, fmnist):
    protocol, result, wire, _ = _run(tmp_path, fmnist)
    records = list(wire.store.records())
    assert len(list(wire.store.records(kind="global_model"))) == 2 * 3
    assert len(list(wire.store.records(kind="update"))) == 2 * 3
    assert len(list(wire.store.records(kind="gradient"))) == 1
    # protocol traffic; the victim's audit-only gradient is recorded but not counted as protocol bytes
    assert wire.totals().as_dict() == {"downlink_bytes": 6 * MODEL_BYTES, "uplink_bytes": 6 * MODEL_BYTES,
                             "total_bytes": 12 * MODEL_BYTES}
    assert sum(r["nbytes"] for r in records) == wire.totals().total_bytes + MODEL_BYTES
    stored = {r["id"] for r in records if r["stored"]}
    assert stored == {"r0001-global_model-server-client3", "r0001-update-client3-server", "r0001-gradient-client3-server"}
    assert "client3" in [r["receiver"] for r in wire.store.records(round=1, kind="global_model")]  # victim swapped in
    assert len(result.history) == 2 and 0.0 <= result.accuracy <= 1.0


def test_victim_gradient_is_the_gradient_at_the_received_model(tmp_path, fmnist):
    _, _, wire, _ = _run(tmp_path, fmnist)
    grad = wire.store.load("r0001-gradient-client3-server")
    base = wire.store.load(grad.base)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    model.load_state_dict(base.tensors)
    idx = torch.tensor(wire.store.truth(grad.id))
    expected = batch_gradient(model, fmnist.train.normalised(idx), fmnist.train.labels[idx])
    assert grad.names == list(expected) and len(idx) == 2
    assert all(torch.allclose(grad.tensors[n], expected[n], atol=1e-6) for n in expected)
    update = wire.store.load("r0001-update-client3-server")
    assert wire.store.truth(update.id) == idx.tolist()  # update_data=batch: trained on the victim batch only
    assert update.training.steps == 1 and update.training.lr == 0.1


@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_same_seed_same_numbers(tmp_path, fmnist):
    _, a, wa, init_a = _run(tmp_path / "a", fmnist, seed=5)
    _, b, wb, init_b = _run(tmp_path / "b", fmnist, seed=5)
    assert [h.accuracy for h in a.history] == [h.accuracy for h in b.history]
    assert all(torch.equal(a.final[k], b.final[k]) for k in init_a)
    ua, ub = wa.store.load("r0001-update-client3-server"), wb.store.load("r0001-update-client3-server")
    assert all(torch.equal(ua.tensors[n], ub.tensors[n]) for n in ua.names)
    _, c, _, _ = _run(tmp_path / "c", fmnist, seed=6)
    assert not torch.equal(a.final["fc.weight"], c.final["fc.weight"])


@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_training_improves_accuracy(tmp_path, fmnist):
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    protocol = FedAvg(rounds=4, participants=5, local_epochs=2, lr=0.1, batch_size=32)
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path), CapturePolicy.build(victim_round=0, victim_client=0))
    result = protocol.run(model=model, data=fmnist, victim=Victim(), wire=wire, seed=0)
    assert result.history[-1].accuracy > 0.5  # iid clients: far above chance (0.1)
