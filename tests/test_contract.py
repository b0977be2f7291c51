"""The payload contract: kind specs, the wire's checks, trainers as the only way to train, stateless protocols."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from privbench.attacks.reconstruction.dlg import DLG
from privbench.attacks.reconstruction.idlg import IDLG
from privbench.attacks.reconstruction.ig import InvertingGradients
from privbench.attacks.reconstruction.projection import SubspaceProjection
from privbench.data import FederatedData
from privbench.defenses.dpsgd import DPSGD
from privbench.errors import ConfigError
from privbench.fl.protocols import ClusterFedAvg, FedAvg, GeneFL, LocalOnly
from privbench.fl.protocols.round import ClientRound
from privbench.fl.sgd import local_train
from privbench.fl.wire import Wire, WireError
from privbench.models import LeNet
from privbench.overrides import options
from privbench.payloads import KINDS, CapturePolicy, LocalTraining, Payload, PayloadStore, kinds_where
from privbench.victim import Victim

PROTOCOLS = (FedAvg, GeneFL, ClusterFedAvg, LocalOnly)


def test_every_kind_has_one_payload_config_and_every_declared_kind_a_spec():
    assert set(options("payload")) == set(KINDS)
    for protocol in PROTOCOLS:
        assert set(protocol.sends) <= set(KINDS), protocol.name


def test_specs_derive_the_lists():
    assert kinds_where(audit_only=True) == ("gradient", "gene_gradient", "aggregate")
    assert kinds_where(direction="up", carries="model", aggregate=False) == ("learngene", "update")
    assert set(kinds_where(readable=False)) == {"global_model", "cluster_gene", *kinds_where(carries="secret")}
    assert len(kinds_where(carries="secret")) == 7  # SecAgg+'s four stages
    for kind in KINDS:  # every kind is either read by some attack or says why not
        readers = [a.name for a in (DLG(), IDLG(), InvertingGradients(), SubspaceProjection()) if not a.cannot_read(kind)]
        assert bool(readers) == KINDS[kind].readable, kind
        assert readers or KINDS[kind].unreadable_why


def test_capture_policy_lists_the_spec_kinds():
    with pytest.raises(ConfigError, match="allowed: all or a list of " + ", ".join(KINDS)):
        CapturePolicy.build(kinds=["nope"], victim_round=0, victim_client=0)


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown payload kind 'weights'"):
        Payload.from_tensors(kind="weights", round=0, sender="client0", receiver="server", tensors={})


def _tiny_data() -> FederatedData:
    data = FederatedData.build(source="fashion_mnist_subset", num_clients=3, partition="iid", agnostic_classes=[])
    data.clients = [c[:40] for c in data.clients]  # small clients: these tests check plumbing, not learning
    return data


def _run(protocol, tmp_path, data, seed=0):
    torch.manual_seed(seed)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path), CapturePolicy.build(victim_round=0, victim_client=0))
    return protocol.run(model=model, data=data, victim=Victim(), wire=wire, seed=seed), wire


def test_wire_refuses_a_kind_the_protocol_did_not_declare(tmp_path):
    protocol = FedAvg(rounds=1, participants=1, local_epochs=1, lr=0.1, batch_size=8)
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path), CapturePolicy.build(victim_round=0, victim_client=0))
    gene = Payload.from_tensors(kind="cluster_gene", round=0, sender="server", receiver="client0",
                                tensors={"w": torch.zeros(2)})
    with pytest.raises(WireError, match="declared it sends global_model, gradient, update, not cluster_gene"):
        wire.send(gene)
    assert not list(wire.store.records())


class _Forgetful(FedAvg):
    """A protocol that trains its clients itself instead of through its trainer."""

    def train_clients(self, jobs) -> list[LocalTraining]:
        records = []
        for job in jobs:
            steps = local_train(job.model, job.data, epochs=self.sgd.epochs, lr=self.sgd.lr,
                                batch_size=self.sgd.batch_size, generator=job.generator)
            records.append(LocalTraining(lr=self.sgd.lr, steps=steps, batch_size=self.sgd.batch_size,
                                         num_samples=len(job.data)))
        return records


@pytest.mark.parametrize("trainer", [None, DPSGD()])
def test_a_protocol_that_bypasses_its_trainer_fails(tmp_path, trainer):
    protocol = _Forgetful(rounds=1, participants=2, local_epochs=1, lr=0.1, batch_size=8, trainer=trainer)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path), CapturePolicy.build(victim_round=0, victim_client=0))
    with pytest.raises(WireError, match="not trained by the configured trainer"):
        protocol.run(model=model, data=_tiny_data(), victim=Victim(), wire=wire, seed=0)
    # no undefended update went out
    assert [r["kind"] for r in wire.store.records()] == ["global_model", "global_model", "gradient"]


def test_a_forged_copy_of_a_record_is_refused(tmp_path):
    protocol = FedAvg(rounds=1, participants=1, local_epochs=1, lr=0.1, batch_size=8)
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path), CapturePolicy.build(victim_round=0, victim_client=0))
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    data = _tiny_data().client(0)
    issued = protocol.trainer.train(model, data, client="client0", sgd=protocol.sgd,
                                    generator=ClientRound(0, 0, 0, Victim(), wire).batch_generator())
    forged = dataclasses.replace(issued)  # equal fields, not issued by the trainer
    assert forged == issued and protocol.trainer.issued(issued) and not protocol.trainer.issued(forged)

    def update(training: LocalTraining) -> Payload:
        return Payload.from_tensors(kind="update", round=0, sender="client0", receiver="server",
                                    tensors=model.state_dict(), training=training)

    with pytest.raises(WireError, match="not trained by the configured trainer"):
        wire.send(update(forged))
    wire.send(update(issued))
    assert [r["kind"] for r in wire.store.records()] == ["update"]


@pytest.mark.parametrize("protocol_cls", PROTOCOLS)
def test_protocols_are_stateless_between_runs(tmp_path, protocol_cls):
    extra = {"num_clusters": 2, "subspace_dim": 2} if protocol_cls in (GeneFL, ClusterFedAvg) else {}
    protocol = protocol_cls(rounds=1, participants=2, local_epochs=1, lr=0.1, batch_size=32, **extra)
    data = _tiny_data()
    before = {k: v for k, v in vars(protocol).items() if k != "trainer"}
    first, _ = _run(protocol, tmp_path / "a", data)
    after = {k: v for k, v in vars(protocol).items() if k != "trainer"}
    second, _ = _run(protocol, tmp_path / "b", data)
    assert before == after
    assert first.accuracy == second.accuracy and first.client_accuracy == second.client_accuracy
    assert all(torch.equal(first.final[n], second.final[n]) for n in first.final)


def test_run_leaves_the_model_unchanged(tmp_path):
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    init = copy.deepcopy(model.state_dict())
    protocol = GeneFL(rounds=1, participants=2, local_epochs=1, lr=0.1, batch_size=32, num_clusters=2, subspace_dim=2)
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path), CapturePolicy.build(victim_round=0, victim_client=0))
    result = protocol.run(model=model, data=_tiny_data(), victim=Victim(), wire=wire, seed=0)
    assert all(torch.equal(model.state_dict()[n], init[n]) for n in init)
    assert result.clustering is not None and len(result.clustering.labels) == 3
    assert set(result.client_accuracy) == {0, 1, 2}


def test_training_record_round_trips_through_the_store(tmp_path):
    protocol = GeneFL(rounds=1, participants=3, local_epochs=1, lr=0.1, batch_size=32, num_clusters=1, subspace_dim=2)
    _, wire = _run(protocol, tmp_path, _tiny_data())
    wire.store.flush()
    sent = next(wire.store.records(kind="learngene", sender="client0"))
    loaded = PayloadStore.open(tmp_path).load(sent["id"])
    assert loaded.training == LocalTraining.from_dict(sent["training"])
    assert (loaded.training.lr, loaded.training.penalty["lambda1"], loaded.training.penalty["lambda2"]) == (0.1, 0.01, 1.0)
    assert loaded.training.proximal == 0.01
    assert loaded.training.steps == loaded.training.epochs * -(-loaded.training.num_samples // 32) >= 1
    assert loaded.condensation is not None and set(loaded.condensation.layers) <= set(loaded.condensation.xi)
    assert {r["phase"] for r in wire.store.records()} == {"training"}
