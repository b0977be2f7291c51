"""Secure aggregation (SecAgg+ in process): the server's sum equals the plain weighted mean, no upload is stored,
the key material and masked vectors are counted, and clients refuse a server that tampers with the shares."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from privbench.attacks.reconstruction.matching import candidate_gradient
from privbench.attacks.target import AttackTarget
from privbench.audit.plan import plan
from privbench.defenses.secure_aggregation import SecAggPlus
from privbench.defenses.secure_aggregation.shamir import combine_shares, create_shares
from privbench.errors import ConfigError
from privbench.fl.protocols.cohort import Plain
from privbench.fl.protocols.fedavg import FedAvg
from privbench.fl.protocols.genefl import GeneFL
from privbench.fl.protocols.round import Upload
from privbench.fl.trainer import SGDTrainer
from privbench.fl.wire import Wire
from privbench.models import LeNet
from privbench.payloads import CapturePolicy, LocalTraining, Payload, PayloadStore
from privbench.payloads.capture import AnyOf
from privbench.payloads.select import PayloadChoice
from privbench.victim import Victim

KEEP_ALL = CapturePolicy.build(kinds="all", rounds="all", clients="all", victim_round=0, victim_client=0)


def _wire(tmp_path, cls=Wire):
    return cls(PayloadStore(tmp_path), KEEP_ALL, sends=("update", *SecAggPlus.sends), trainer=SGDTrainer())


def _uploads(weights, tensors):
    out = []
    for i, (w, t) in enumerate(zip(weights, tensors)):
        training = LocalTraining(lr=0.1, steps=1, batch_size=w, num_samples=w)
        p = Payload.from_tensors(kind="update", round=0, sender=f"client{i}", receiver="server", tensors=t,
                                 base=f"r0000-global_model-server-client{i}", training=training)
        out.append(Upload(w, p, list(t)))
    return out


BASE = {"a": torch.zeros(4, 3), "b": torch.full((5,), 7.0), "steps": torch.tensor(3)}


def _three():
    g = torch.Generator().manual_seed(0)
    tensors = [{"a": torch.randn(4, 3, generator=g), "b": torch.randn(5, generator=g)},
               {"a": torch.randn(4, 3, generator=g)},  # a partial upload (a learnGene without b)
               {"a": torch.randn(4, 3, generator=g), "b": torch.randn(5, generator=g)}]
    return [2, 3, 5], tensors


def test_shamir_any_threshold_shares_rebuild_and_fewer_do_not():
    secret = os.urandom(32)
    shares = create_shares(secret, 3, 5)
    for subset in ([0, 1, 2], [4, 2, 0], [1, 3, 4]):
        assert combine_shares([shares[i] for i in subset]) == secret
    with pytest.raises(ValueError, match="do not rebuild"):
        combine_shares(shares[:2])
    with pytest.raises(ValueError, match="distinct"):
        combine_shares([shares[0], shares[0], shares[1]])


def test_secure_sum_is_the_weighted_mean_over_each_names_senders(tmp_path):
    weights, tensors = _three()
    secagg = SecAggPlus(max_weight=10.0)
    wire = _wire(tmp_path)
    out = secagg.combine(BASE, _uploads(weights, tensors), round_=0, group=None, wire=wire, seed=0)
    # by hand: a over all three (weights 2, 3, 5), b over clients 0 and 2 only (2, 5); the integer buffer stays
    a = (2 * tensors[0]["a"] + 3 * tensors[1]["a"] + 5 * tensors[2]["a"]) / 10
    b = (2 * tensors[0]["b"] + 5 * tensors[2]["b"]) / 7
    step = 2 * 8.0 / 2**22 / 0.2  # one quantisation level over the smallest summed weight share
    assert torch.allclose(out["a"], a, atol=3 * step) and torch.allclose(out["b"], b, atol=3 * step)
    assert not torch.equal(out["a"], a)  # it went through quantisation, not a copy of the plain mean
    assert out["steps"].item() == 3
    plain = Plain().combine(BASE, _uploads(weights, tensors), round_=0, group=None, wire=wire, seed=0)
    assert all(torch.allclose(out[n], plain[n], atol=3 * step) for n in ("a", "b"))


def test_no_upload_is_recorded_and_every_secagg_message_is_counted(tmp_path):
    weights, tensors = _three()
    wire = _wire(tmp_path)
    SecAggPlus(max_weight=10.0).combine(BASE, _uploads(weights, tensors), round_=0, group=None, wire=wire,
                                        seed=0)
    kinds = [r["kind"] for r in wire.store.records()]
    assert "update" not in kinds
    per_client = ("secagg_public_keys", "secagg_neighbour_keys", "secagg_key_shares", "secagg_forwarded_shares",
                  "masked_upload", "secagg_unmask_request", "secagg_unmask_shares")
    assert all(kinds.count(k) == 3 for k in per_client) and kinds.count("aggregate") == 1
    masked = wire.store.load("r0000-masked_upload-client1-server")
    # the full layout for every client (2 weights, 12 + 5 values), 4 bytes a coordinate, whatever it sent
    assert masked.nbytes == 4 * (2 + 12 + 5) and masked.names == ["masked"]
    values = masked.tensors["masked"].numpy().view(np.uint32)
    plainly = np.round((np.clip(0.3 * tensors[1]["a"].numpy().ravel(), -8, 8) + 8) * 2**22 / 16)
    assert not np.any(np.isclose(values[2:14].astype(float), plainly, atol=4))  # masked, not the quantised upload
    assert wire.store.load("r0000-secagg_public_keys-client0-server").nbytes == 64  # two raw X25519 keys
    neighbours = wire.store.load("r0000-secagg_neighbour_keys-server-client0")
    assert neighbours.nbytes == 3 * 64  # num_shares=1.0: every client (itself included) is a neighbour
    # protocol bytes: every secagg message but the server's own aggregate (audit-only)
    counted = sum(r["nbytes"] for r in wire.store.records() if r["kind"] != "aggregate")
    assert wire.totals().total_bytes == counted
    assert wire.store.truth("r0000-masked_upload-client0-server") == []  # no held upload, no truth


def test_fresh_keys_fresh_masks_same_aggregate(tmp_path):
    weights, tensors = _three()
    runs = []
    for name in ("a", "b"):
        wire = _wire(tmp_path / name)
        out = SecAggPlus(max_weight=10.0).combine(BASE, _uploads(weights, tensors), round_=0, group=None,
                                                  wire=wire, seed=4)
        runs.append((out, wire.store.load("r0000-masked_upload-client0-server").tensors["masked"]))
    assert torch.equal(runs[0][0]["a"], runs[1][0]["a"])  # the rounding is seeded
    assert not torch.equal(runs[0][1], runs[1][1])  # the masks come from fresh keys


class _Tampering(Wire):
    """A server that flips one byte of every share it forwards."""

    def send(self, payload, *, truth=()):
        if payload.kind == "secagg_forwarded_shares":
            tensors = {n: t.clone() for n, t in payload.tensors.items()}
            for t in tensors.values():
                t[20] ^= 1
            payload = payload.with_tensors(tensors)
        return super().send(payload, truth=truth)


def test_a_client_refuses_altered_shares(tmp_path):
    weights, tensors = _three()
    wire = _wire(tmp_path, _Tampering)
    with pytest.raises(ValueError, match="authentication tag"):
        SecAggPlus(max_weight=10.0).combine(BASE, _uploads(weights, tensors), round_=0, group=None, wire=wire,
                                            seed=0)


@pytest.mark.parametrize("shares, threshold, n, expected", [
    (1.0, 0.5, 5, (5, 2)), (0.5, 0.5, 10, (5, 2)), (0.4, 0.6, 10, (5, 3)), (5, 3, 8, (5, 3)), (1.0, 0.5, 2, (2, 2)),
])
def test_share_counts_follow_flowers_rules(shares, threshold, n, expected):
    secagg = SecAggPlus(num_shares=shares, reconstruction_threshold=threshold)
    assert secagg.sizes(n) == expected
    ring = secagg.ring([f"client{i}" for i in range(n)], expected[0], round_=0, group=None)
    assert all(len(v) == expected[0] and u in v for u, v in ring.items())
    assert all(u in ring[v] for u, vs in ring.items() for v in vs)  # neighbours both ways


@pytest.mark.parametrize("key, value, message", [
    ("num_shares", 2, "must be >= 3"), ("num_shares", 1.5, "at most 1.0"),
    ("modulus_range", 3 * 2**20, "power of 2"), ("modulus_range", 2**40, "at most 2"),
    ("reconstruction_threshold", 0, "> 0"), ("clipping_range", 0.0, "> 0"),
])
def test_bad_settings_are_one_line(key, value, message):
    with pytest.raises(ConfigError, match=message):
        SecAggPlus(**{key: value})


def _fedavg(tmp_path, aggregation, fmnist):
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    protocol = FedAvg(rounds=2, participants=3, local_epochs=1, lr=0.1, batch_size=64, aggregation=aggregation)
    victim = Victim(client=3, round=1, num_images=2)
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path), KEEP_ALL)
    return protocol.run(model=model, data=fmnist, victim=victim, wire=wire, seed=0), wire


@pytest.mark.slow  # over 1.2 s: the quick suite's 4-minute goal
def test_fedavg_under_secagg_trains_the_same_model_and_stores_no_upload(tmp_path, fmnist):
    plain, _ = _fedavg(tmp_path / "plain", None, fmnist)
    secure, wire = _fedavg(tmp_path / "secagg", SecAggPlus(), fmnist)
    # 600 samples a client: weights 0.6, three clients: a level (3.8e-6) over 1.8, accumulated over two rounds
    assert all(torch.allclose(secure.final[n], plain.final[n], atol=2e-5) for n in plain.final)
    kinds = {r["kind"] for r in wire.store.records()}
    assert not kinds & {"update", "gradient"}
    assert len(list(wire.store.records(kind="masked_upload"))) == 6
    assert len(list(wire.store.records(kind="aggregate"))) == 2
    aggregate = wire.store.load("r0001-aggregate-cohort0-server")
    assert all(torch.allclose(aggregate.tensors[n], secure.final[n]) for n in aggregate.names)
    assert [p.client for p in aggregate.training.parts] == [r["sender"] for r in
                                                            wire.store.records(kind="masked_upload", round=1)]
    truth = wire.store.truth("r0001-masked_upload-client3-server")
    assert len(truth) == 2  # the victim's held upload: trained on its victim batch (update_data=batch)


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_genefl_learngenes_are_masked_at_the_full_models_size(tmp_path, fmnist):
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    protocol = GeneFL(rounds=1, participants=6, local_epochs=1, lr=0.1, batch_size=64, num_clusters=2,
                      gene={"gamma": 2}, agnostic={"fedavg_reference": False}, aggregation=SecAggPlus())
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path), KEEP_ALL)
    protocol.run(model=model, data=fmnist, victim=Victim(client=0, round=0), wire=wire, seed=0)
    full = sum(t.numel() for t in model.state_dict().values()) + len(model.state_dict())
    masked = list(wire.store.records(kind="masked_upload"))
    assert masked and all(r["nbytes"] == 4 * full for r in masked)
    assert not list(wire.store.records(kind="learngene"))
    clusters = {r["cluster"] for r in masked}
    assert {r["cluster"] for r in wire.store.records(kind="aggregate")} <= clusters
    for rec in wire.store.records(kind="aggregate"):
        parts = wire.store.load(rec["id"]).training.parts
        assert all(len(p.names) < len(model.state_dict()) for p in parts)  # each sent its gene layers only


def test_the_aggregate_replays_as_its_members_trained(tmp_path, four_pairs):
    data = four_pairs
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    victim = Victim(client=0, round=0, num_images=2)
    choice = PayloadChoice(kind="aggregate")
    policy = AnyOf((CapturePolicy.build(victim_round=0, victim_client=0), choice.capture(victim)))
    protocol = FedAvg(rounds=1, participants=4, local_epochs=1, lr=0.1, batch_size=2,
                      aggregation=SecAggPlus(max_weight=2.0))
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path), policy)
    protocol.run(model=model, data=data, victim=victim, wire=wire, seed=0)
    payload, base = choice.select(wire.store, victim)
    assert sorted(choice.truth(wire.store, payload)) == sorted(np.concatenate(data.clients).tolist())
    assert choice.images(payload, victim) == 8 and base.id == "r0000-global_model-server-client0"
    target = AttackTarget.from_payload(payload, base=base, model=LeNet(in_channels=1, image_size=28, num_classes=10),
                                       num_images=8, image_shape=(1, 28, 28), num_classes=10, unroll=True)
    members = [torch.tensor(wire.store.truth(r["id"])) for r in wire.store.records(kind="masked_upload")]
    images = torch.cat([data.train.normalised(idx) for idx in members])
    labels = torch.cat([data.train.labels[idx] for idx in members])
    replay = candidate_gradient(target, images, labels=labels)
    # quantisation: a level (3.8e-6) in each weight-1 share, over the summed weight 4, over lr x steps = 0.1
    assert all(torch.allclose(replay[n], target.gradient[n], atol=1e-4) for n in target.gradient)


@pytest.mark.parametrize("overrides, message", [
    (["aggregation=secagg"], "payload=learngene: under aggregation=secagg the server never sees"),
    (["aggregation=secagg", "fl=fedavg", "payload=gradient"], "attack payload=aggregate"),
    (["aggregation=secagg", "payload=aggregate", "engine=flower"], "engine=flower: aggregation=secagg: Flower's SecAgg"
                                                                     r"\+ sums one layout"),
    (["payload=aggregate"], "payload=aggregate: fl=genefl sends subspace"),
])
def test_plan_refuses_what_the_server_cannot_see(compose_cfg, overrides, message):
    with pytest.raises(ConfigError, match=message):
        plan(compose_cfg(*overrides))


SECURE_IMPRINT = ["fl=fedavg", "data.num_clients=100", "fl.participants=2", "fl.rounds=1", "fl.local_epochs=1",
                  "fl.batch_size=64", "victim.update_data=all", "attack=imprint", "attack.bins=1024",
                  "metrics.lpips=false", "aggregation=secagg", "payload=aggregate"]


@pytest.mark.slow
def test_imprint_through_secure_aggregation_needs_the_servers_own_quantisation(tmp_path):
    """Fowl et al.'s imprint read from the cohort's secure aggregate: at Flower's SecAgg+ defaults (2^22 levels over
    +/-8, weights over 1000) the quantisation drowns the imprint rows; a server that sets the parameters itself
    (weights over the largest client, 2^28 levels over +/-1) and the block's scale reads most of the cohort."""
    from privbench import api

    default = api.run(SECURE_IMPRINT, results_dir=str(tmp_path / "a")).metrics
    chosen = api.run([*SECURE_IMPRINT, "aggregation.max_weight=64", "aggregation.clipping_range=1.0",
                      "aggregation.quantization_range=268435456", "attack.scale=1.0"],
                     results_dir=str(tmp_path / "b")).metrics
    assert default["privacy"]["num_true"] == chosen["privacy"]["num_true"] == 96  # both members' 48 images
    assert default["privacy"]["recovered_fraction"] == 0.0
    assert chosen["privacy"]["recovered_fraction"] >= 0.6  # the isolation law over 96 images and 1024 bins: 0.91
    assert chosen["threat_model"]["server"] == "active"
    assert "secagg aggregate of 2 updates" in chosen["threat_model"]["reply"]


def test_an_agreed_download_digest_travels_with_the_keys_and_a_differing_one_abandons_the_round(tmp_path):
    """``agreed_download``: each member's public keys carry 32 more bytes (the SHA-256 of the model it received),
    relayed to its neighbours; the same digest everywhere gives the same mean as without the check, one member told
    another model makes every member that sees it send no shares, and the model stays as sent."""
    from privbench.defenses.secure_aggregation.exchange import digest

    weights, tensors = _three()
    plain = SecAggPlus(max_weight=10.0).combine(BASE, _uploads(weights, tensors), round_=0, group=None,
                                                wire=_wire(tmp_path / "plain"), seed=0)
    agreed, wire = SecAggPlus(max_weight=10.0, agreed_download=True), _wire(tmp_path / "agreed")
    out = agreed.combine(BASE, _uploads(weights, tensors), round_=0, group=None, wire=wire, seed=0)
    assert agreed.abandoned == [] and all(torch.equal(out[n], plain[n]) for n in BASE)
    assert wire.store.load("r0000-secagg_public_keys-client0-server").nbytes == 64 + 32
    assert wire.store.load("r0000-secagg_neighbour_keys-server-client0").nbytes == 3 * (64 + 32)
    assert digest(BASE) == digest({n: t.clone() for n, t in BASE.items()}) != digest({**BASE, "b": BASE["b"] + 1e-3})
    told = {"client0": digest(BASE), "client1": digest({**BASE, "b": BASE["b"] + 1e-3}), "client2": digest(BASE)}
    wire = _wire(tmp_path / "inconsistent")
    out = agreed.combine(BASE, _uploads(weights, tensors), round_=0, group=None, wire=wire, seed=0, received=told)
    assert agreed.abandoned == ["client0", "client1", "client2"]  # num_shares=1.0: each sees client1's digest
    assert all(torch.equal(out[n], BASE[n]) for n in BASE)
    kinds = [r["kind"] for r in wire.store.records()]
    assert "secagg_key_shares" not in kinds and "masked_upload" not in kinds and "aggregate" not in kinds
