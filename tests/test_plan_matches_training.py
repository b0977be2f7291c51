"""The server's plan agrees with honest training: BatchNorm's integer buffers in a model upload (checked against the
server's own model, name by name) and Opacus' Poisson loader's step count (one fewer than ceil(n / B) for some n)."""
from __future__ import annotations

import dataclasses
from collections import OrderedDict

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from privbench.defenses.calibration import events
from privbench.defenses.dpsgd import DPSGD
from privbench.fl.engine.inprocess import ClientReplyError
from privbench.fl.protocols.fedavg import FedAvg
from privbench.fl.protocols.replies import check_tensor
from privbench.fl.reads import PlannedRead
from privbench.fl.trainer import LocalSGD, SGDTrainer
from privbench.fl.wire import Wire
from privbench.models import ResNet18
from privbench.payloads import CapturePolicy, PayloadStore
from privbench.victim import Victim

COUNT = "bn.num_batches_tracked"


def _bn_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(OrderedDict(conv=nn.Conv2d(1, 2, 5, stride=4), bn=nn.BatchNorm2d(2), relu=nn.ReLU(),
                                     flat=nn.Flatten(), fc=nn.Linear(2 * 6 * 6, 10)))


def _run(tmp_path, data, model, *, trainer=None, batch_size=2, victim=Victim(client=1, round=0, num_images=2)):
    protocol = FedAvg(rounds=1, participants=data.num_clients, local_epochs=1, lr=0.1, batch_size=batch_size,
                      trainer=trainer)
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path), CapturePolicy.build(victim_round=0, victim_client=1))
    return protocol, protocol.run(model=model, data=data, victim=victim, wire=wire, seed=0)


# -- bug 1: integer tensors of the model's own state -----------------------------------------------------------------

def test_a_resnet18_bn_update_passes_the_tensor_check():
    state = ResNet18(in_channels=1, image_size=28, num_classes=10, norm="bn").state_dict()
    assert state["bn1.num_batches_tracked"].dtype == torch.int64
    for name, t in state.items():
        check_tensor("up", name, t + 1 if not t.is_floating_point() else t, state, of_model=True)


@pytest.mark.parametrize("forged, message", [
    (torch.zeros((), dtype=torch.int32), r"bn.num_batches_tracked is int32 \[\], not a floating tensor; the model's "
                                         r"is int64 \[\]"),
    (torch.zeros(1, dtype=torch.int64), r"is int64 \[1\], not a floating tensor; the model's is int64 \[\]"),
    (torch.zeros((), dtype=torch.bool), "is bool"),
])
def test_an_integer_tensor_of_another_dtype_or_shape_is_refused(forged, message):
    state = _bn_model().state_dict()
    with pytest.raises(ValueError, match=message):
        check_tensor("up", COUNT, forged, state, of_model=True)


def test_an_integer_tensor_in_a_float_slot_or_outside_the_model_is_refused():
    state = _bn_model().state_dict()
    with pytest.raises(ValueError, match=r"fc.bias is int64 \[10\], not a floating tensor; the model's is float32"):
        check_tensor("up", "fc.bias", torch.zeros(10, dtype=torch.int64), state, of_model=True)
    with pytest.raises(ValueError, match=r"extra is int64 \[\], not a floating tensor$"):
        check_tensor("up", "extra", torch.zeros((), dtype=torch.int64), state, of_model=False)
    with pytest.raises(ValueError, match="holds NaN"):
        check_tensor("up", "fc.bias", torch.full((10,), float("nan")), state, of_model=True)


def test_an_honest_fedavg_round_of_a_batchnorm_model_passes_in_process(tmp_path, four_pairs):
    _, result = _run(tmp_path, four_pairs, _bn_model())
    assert result.final[COUNT].dtype == torch.int64 and int(result.final[COUNT]) >= 1


@pytest.mark.parametrize("change, message", [
    (lambda t: {**t, COUNT: t[COUNT].float()}, "bn.num_batches_tracked is float32 \\[\\], the model's is int64"),
    (lambda t: {**t, COUNT: t[COUNT].int()}, "is int32 \\[\\], not a floating tensor"),
    (lambda t: {**t, "fc.bias": t["fc.bias"].long()}, "fc.bias is int64 \\[10\\], not a floating tensor"),
])
def test_a_forged_integer_tensor_in_a_batchnorm_upload_is_refused(tmp_path, four_pairs, monkeypatch, change, message):
    honest = FedAvg.end_round

    def end_round(self, pending, training, state):  # type: ignore[no-untyped-def]
        up = honest(self, pending, training, state)
        return dataclasses.replace(up, payload=up.payload.with_tensors(change(dict(up.tensors))))
    monkeypatch.setattr(FedAvg, "end_round", end_round)
    with pytest.raises(ClientReplyError, match=f"sent a reply the server refuses: .*{message}"):
        _run(tmp_path, four_pairs, _bn_model())


# -- bug 2: DP-SGD's planned steps are Opacus' Poisson loader's ------------------------------------------------------

@pytest.mark.parametrize("k", [92, 93, 99, 100, 105, 186])
def test_planned_steps_are_the_poisson_loader_s_length(k):
    from opacus.data_loader import DPDataLoader

    loader = DPDataLoader.from_data_loader(DataLoader(TensorDataset(torch.zeros(k, 1)), batch_size=1))
    for epochs in (1, 2):
        sgd = LocalSGD(epochs=epochs, lr=0.1, batch_size=1)
        assert DPSGD().planned_steps(k, sgd) == epochs * len(loader)
        assert events([PlannedRead("local_sgd", k, 1, epochs)]) == [(1 / len(loader), epochs * len(loader))]
    assert SGDTrainer().planned_steps(k, LocalSGD(epochs=1, lr=0.1, batch_size=1)) == k


def _linear() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10))


def test_an_honest_dpsgd_round_of_93_samples_at_batch_1_passes_in_process(tmp_path, fmnist):
    data = dataclasses.replace(fmnist, clients=[fmnist.clients[0][:93], fmnist.clients[1][:2]])
    dp = DPSGD(noise_multiplier=1.0)
    _run(tmp_path, data, _linear(), trainer=dp, batch_size=1)
    assert dp.engines["client0"].accountant.history == [(1.0, 1 / 92, 92)]  # 92 steps, as planned
    assert events([PlannedRead("local_sgd", 93, 1, 1)]) == [(1 / 92, 92)]


def test_a_remote_client_s_93_sample_report_composes_as_planned(fmnist):
    client, server = DPSGD(noise_multiplier=1.0), DPSGD(noise_multiplier=1.0)
    record = client.train(_linear(), fmnist.client(0).subset(torch.arange(93)), client="client0",
                          sgd=LocalSGD(epochs=1, lr=0.1, batch_size=1), generator=torch.Generator().manual_seed(0))
    assert record.steps == 92 == server.planned_steps(93, LocalSGD(epochs=1, lr=0.1, batch_size=1))
    server.compose_report("client0", client.take_report("client0"), planned=[PlannedRead("local_sgd", 93, 1, 1)])
    assert server.engines["client0"].accountant.history == [(1.0, 1 / 92, 92)]
