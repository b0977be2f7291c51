"""fl.vectorise: a round's clients trained as one stacked model equal one-by-one training."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from privbench.data import FederatedData
from privbench.fl.fisher import fisher_diagonal
from privbench.fl.genefl.fisher import GeneRegulariser
from privbench.fl.protocols import FedAvg, GeneFL
from privbench.fl.sgd import local_train
from privbench.fl.trainer import LocalSGD, SGDTrainer
from privbench.fl.vectorised import LocalJob, stacked_local_train, why_not_stacked
from privbench.fl.wire import Wire
from privbench.models import LeNet
from privbench.payloads import CapturePolicy, PayloadStore
from privbench.victim import Victim


def _data() -> FederatedData:
    data = FederatedData.build(source="fashion_mnist_subset", num_clients=4, partition="iid", agnostic_classes=[])
    data.clients = [c[:50] for c in data.clients]
    return data


def _jobs(data: FederatedData, *, sizes: tuple[int, ...], regularised: bool) -> list[LocalJob]:
    torch.manual_seed(3)
    base = LeNet(in_channels=1, image_size=28, num_classes=10)
    jobs = []
    for c, n in enumerate(sizes):
        model, client_data = copy.deepcopy(base), data.client(c).subset(torch.arange(n))
        reg = None
        if regularised:
            anchor = {k: p.detach().clone() for k, p in model.named_parameters()}
            reg = GeneRegulariser(anchor=anchor, fisher=fisher_diagonal(model, client_data), lambda1=0.01, lambda2=1.0,
                                  eps=1e-6)
        jobs.append(LocalJob(model, client_data, f"client{c}", torch.Generator().manual_seed(10 + c), reg))
    return jobs


@pytest.mark.slow  # 5-8 s a case
@pytest.mark.parametrize("momentum,regularised", [(0.0, True), (0.9, False)])
def test_stacked_training_equals_one_by_one(momentum, regularised):
    data = _data()
    sizes = (50, 3, 17)  # unequal step counts: 4, 1 and 2 steps per epoch at batch 16
    alone, stacked = _jobs(data, sizes=sizes, regularised=regularised), _jobs(data, sizes=sizes, regularised=regularised)
    steps_alone = [local_train(j.model, j.data, epochs=2, lr=0.1, batch_size=16, momentum=momentum,
                               generator=j.generator, regulariser=j.regulariser) for j in alone]
    steps = stacked_local_train(stacked, epochs=2, lr=0.1, batch_size=16, momentum=momentum)
    assert steps == steps_alone == [8, 2, 4]
    start = _jobs(data, sizes=sizes, regularised=False)[0].model
    for a, b in zip(alone, stacked):
        assert max(float((p - q).detach().abs().max()) for p, q in zip(a.model.parameters(), start.parameters())) > 1e-3
        for (name, p), q in zip(a.model.named_parameters(), b.model.parameters()):
            torch.testing.assert_close(q, p, atol=2e-5, rtol=1e-4, msg=name)


def test_models_that_cannot_stack_say_why_and_train_one_by_one():
    data = _data()
    bn = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2 * 26 * 26, 10))
    jobs = [LocalJob(copy.deepcopy(bn), data.client(c), f"client{c}", torch.Generator().manual_seed(c)) for c in range(2)]
    assert "batch norm" in str(why_not_stacked(jobs))
    drop = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(784, 10))
    assert "dropout" in str(why_not_stacked([LocalJob(drop, data.client(0), "client0", torch.Generator())] * 2))
    reference = [copy.deepcopy(j.model) for j in jobs]
    records = SGDTrainer().train_all(jobs, sgd=LocalSGD(epochs=1, lr=0.1, batch_size=16), vectorise=True)
    for j, ref, c in zip(jobs, reference, range(2)):
        local_train(ref, data.client(c), epochs=1, lr=0.1, batch_size=16, generator=torch.Generator().manual_seed(c))
        for p, q in zip(j.model.parameters(), ref.parameters()):
            assert torch.equal(p, q)  # the one-by-one path, exactly
    assert [r.steps for r in records] == [4, 4]


def _run(protocol, data, tmp_path):
    store = PayloadStore(tmp_path)
    wire = Wire.for_protocol(protocol, store, CapturePolicy.build(kinds="all", rounds="all", clients="all",
                                                                  victim_round=0, victim_client=0))
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    result = protocol.run(model=model, data=data, victim=Victim(client=1, round=1), wire=wire, seed=0)
    return result, wire, store


@pytest.mark.slow
@pytest.mark.parametrize("cls,extra", [(FedAvg, {}), (GeneFL, {"num_clusters": 2, "subspace_dim": 2})])
def test_a_vectorised_protocol_sends_the_same_messages(tmp_path, cls, extra):
    data = _data()
    runs = {}
    for vectorise in (False, True, True):
        protocol = cls(rounds=2, participants=3, local_epochs=1, lr=0.1, batch_size=16, vectorise=vectorise, **extra)
        key = (vectorise, len(runs))
        runs[key] = _run(protocol, data, tmp_path / str(len(runs)))
    (plain, plain_wire, plain_store), (vec, vec_wire, vec_store), (again, _, again_store) = runs.values()
    assert vec_wire.totals() == plain_wire.totals()
    records = list(plain_store.records())
    assert [(r["id"], r["kind"], r["nbytes"]) for r in vec_store.records()] == \
        [(r["id"], r["kind"], r["nbytes"]) for r in records]
    assert {r["kind"] for r in records} >= {"gradient", "learngene" if cls is GeneFL else "update"}
    for r in records:
        a, b, c = plain_store.load(r["id"]), vec_store.load(r["id"]), again_store.load(r["id"])
        for name in a.tensors:
            torch.testing.assert_close(b.tensors[name], a.tensors[name], atol=1e-4, rtol=1e-3, msg=r["id"])
            assert torch.equal(b.tensors[name], c.tensors[name])  # seeded: the same numbers twice
    assert abs(vec.accuracy - plain.accuracy) < 0.03
