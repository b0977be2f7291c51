"""DP accounting over a whole run: calibrated to the target for every client, every read listed and covered."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from opacus.accountants import RDPAccountant
from scipy.linalg import subspace_angles

from privbench.defenses.calibration import epsilon, events, noise_multiplier
from privbench.defenses.dp_reads import dp_fisher_diagonal, dp_subspace
from privbench.defenses.dpsgd import DPSGD
from privbench.errors import ConfigError
from privbench.fl.fisher import fisher_diagonal, squared_gradients
from privbench.fl.protocols.fedavg import FedAvg
from privbench.fl.protocols.genefl import GeneFL
from privbench.fl.reads import PlannedRead
from privbench.fl.sgd import per_sample_gradients
from privbench.fl.trainer import LocalSGD
from privbench.fl.wire import Wire
from privbench.models import LeNet
from privbench.payloads import CapturePolicy, PayloadStore
from privbench.victim import Victim

COVER = ("fisher_diagonal", "subspace")


@pytest.fixture(scope="module")
def three_small_clients(fmnist):
    """Three clients of 40 images each (3 Poisson batches of 16 per epoch)."""
    return dataclasses.replace(fmnist, clients=[c[:40] for c in fmnist.clients[:3]])


def _run(protocol_name, data, dp, tmp_path):
    kwargs = dict(rounds=2, participants=3, local_epochs=1, lr=0.1, batch_size=16, trainer=dp)
    # GENE-FL's proximal step: the DP Fisher on LeNet at lr 0.1 puts the paper's gradient step past its bound
    gene = dict(num_clusters=2, subspace_dim=3, penalty_step="proximal")
    protocol = FedAvg(**kwargs) if protocol_name == "fedavg" else GeneFL(**gene, **kwargs)
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    victim = Victim(client=1, round=1, num_images=2)
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path), CapturePolicy.build(victim_round=1, victim_client=1))
    protocol.run(model=model, data=data, victim=victim, wire=wire, seed=0)
    return protocol


@pytest.mark.parametrize("protocol_name", ["fedavg", pytest.param("genefl", marks=pytest.mark.slow)])
@pytest.mark.parametrize("target", [1.0, pytest.param(8.0, marks=pytest.mark.slow)])
def test_target_epsilon_holds_for_every_client_and_the_victim(protocol_name, target, three_small_clients, tmp_path):
    dp = DPSGD(target_epsilon=target, delta=1e-5, cover=COVER if protocol_name == "genefl" else ())
    _run(protocol_name, three_small_clients, dp, tmp_path)
    spent = dp.epsilons()
    assert set(spent) == {"client0", "client1", "client2"}  # every client joins every round
    for client, eps in spent.items():
        assert 0.9 * target <= eps <= target, (client, eps)
    # the victim's schedule, stepped by hand on an independent accountant at its reported sigma
    sigma, genefl = dp.sigmas["client1"], protocol_name == "genefl"
    independent = RDPAccountant()
    if genefl:
        independent.step(noise_multiplier=sigma, sample_rate=1.0)  # DP-PCA subspace
    for _ in range(3):  # round 0: 40 images, 3 Poisson batches of rate 1/3
        independent.step(noise_multiplier=sigma, sample_rate=1 / 3)
    independent.step(noise_multiplier=sigma, sample_rate=1.0)  # round 1: audit gradient on a fixed batch
    independent.step(noise_multiplier=sigma, sample_rate=1.0)  # round 1: trains on its 2-image victim batch
    for _ in range(2 if genefl else 0):
        independent.step(noise_multiplier=sigma, sample_rate=1.0)  # DP Fisher, each round
    assert spent["client1"] == pytest.approx(independent.get_epsilon(delta=1e-5), rel=1e-9)
    assert sigma > dp.sigmas["client0"]  # the victim's extra rate-1 releases need more noise for the same target
    if genefl:
        assert dp.uncovered_reads() == []
        assert {r.what for r in dp.reads()} == {"local_sgd", "audit_gradient", "fisher_diagonal", "subspace"}


def test_reads_not_covered_are_listed_as_uncovered(three_small_clients, tmp_path):
    dp = DPSGD(noise_multiplier=1.0)
    _run("genefl", three_small_clients, dp, tmp_path)
    assert dp.uncovered_reads() == ["subspace", "fisher_diagonal"]
    covered = {r.what: r.covered for r in dp.reads()}
    assert covered["local_sgd"] and covered["audit_gradient"]


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_calibration_spends_between_98_and_100_percent_of_the_target():
    schedule = events([PlannedRead("local_sgd", 400, 32, 2), PlannedRead("audit_gradient", 1)] * 5)
    assert schedule == [(1 / 13, 130), (1.0, 5)]
    for target in (0.5, 1.0, 8.0, 50.0):
        sigma = noise_multiplier(schedule, target_epsilon=target, delta=1e-5)
        assert 0.98 * target <= epsilon(sigma, schedule, delta=1e-5) <= target


def test_empty_poisson_batches_train_as_opacus_intends(fmnist):
    """Batch size 1 on 20 samples: rate 1/20, so about a third of the 20 Poisson batches are empty."""
    dp = DPSGD(noise_multiplier=1.0)
    data = fmnist.client(0).subset(torch.arange(20))
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    record = dp.train(model, data, client="client0", sgd=LocalSGD(epochs=1, lr=0.1, batch_size=1),
                      generator=torch.Generator().manual_seed(0))
    assert record.steps == 20
    assert dp.engines["client0"].accountant.history == [(1.0, 1 / 20, 20)]
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_dp_fisher_is_the_clipped_fisher_plus_gaussian_noise(fmnist):
    data = fmnist.client(0).subset(torch.arange(16))
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    exact = fisher_diagonal(model, data)
    unclipped = dp_fisher_diagonal(model, data, clip=1e6, sigma=0.0, generator=torch.Generator())
    assert all(torch.allclose(exact[k], unclipped[k], rtol=1e-5, atol=1e-9) for k in exact)
    # sensitivity: one more sample moves the clipped sum by at most clip^2 in L2 norm
    clip = 0.5
    with_one = squared_gradients(model, fmnist.client(0).subset(torch.arange(17)), clip=clip)
    without = squared_gradients(model, data, clip=clip)
    change = math.sqrt(sum(float(((with_one[k] - without[k]) ** 2).sum()) for k in without))
    assert change <= clip**2 + 1e-6
    noisy = dp_fisher_diagonal(model, data, clip=clip, sigma=2.0, generator=torch.Generator().manual_seed(1))
    assert all((v >= 0).all() for v in noisy.values())
    # the noise on the sum is N(0, (sigma clip^2)^2): its negative half is clamped, its positive half kept
    residual = torch.cat([(noisy[k] * 16 - without[k]).flatten() for k in without])
    positive = residual[residual > 1e-3]
    assert float(positive.mean()) == pytest.approx(2.0 * clip**2 * math.sqrt(2 / math.pi), rel=0.05)


def test_dp_pca_recovers_a_planted_subspace_and_degrades_with_noise():
    gen = torch.Generator().manual_seed(0)
    planted = torch.linalg.qr(torch.randn(64, 3, generator=gen))[0]
    images = (torch.randn(2000, 3, generator=gen) * torch.tensor([3.0, 2.0, 1.5])) @ planted.T
    images = images + 0.01 * torch.randn(2000, 64, generator=gen)
    quiet = dp_subspace(images, 3, sigma=1.0, generator=torch.Generator().manual_seed(1))
    loud = dp_subspace(images, 3, sigma=500.0, generator=torch.Generator().manual_seed(1))
    assert max(subspace_angles(quiet.double().numpy(), planted.double().numpy())) < 0.2
    assert max(subspace_angles(loud.double().numpy(), planted.double().numpy())) > 1.0


def test_unknown_cover_is_a_config_error():
    with pytest.raises(ConfigError, match="defense.cover"):
        DPSGD(cover=["gradient"])
    assert np.isclose(noise_multiplier([], target_epsilon=1.0, delta=1e-5), 0.0)


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_two_victims_audit_gradients_carry_independent_noise(three_small_clients, tmp_path):
    """Released under DP-SGD, two victims' audit gradients differ by noise of std sqrt(2) sigma C per coordinate
    (the same noise on both would cancel, and their difference would reveal their clipped gradients' exactly)."""
    dp = DPSGD(target_epsilon=8.0, delta=1e-5, max_grad_norm=1.0)
    protocol = FedAvg(rounds=1, participants=3, local_epochs=1, lr=0.1, batch_size=16, trainer=dp)
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    victim = Victim(client=0, round=0, num_images=2, clients=[1])
    policy = CapturePolicy.build(kinds="all", rounds="all", clients="all", victim_round=0, victim_client=0)
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path), policy)
    protocol.run(model=model, data=three_small_clients, victim=victim, wire=wire, seed=0)
    noise = []
    for c in (0, 1):
        released = wire.store.load(f"r0000-gradient-client{c}-server")
        start = LeNet(in_channels=1, image_size=28, num_classes=10)
        start.load_state_dict(wire.store.load(released.base).tensors)
        index = torch.tensor(wire.store.truth(released.id))
        train = three_small_clients.train
        clean = per_sample_gradients(start, train.normalised(index), train.labels[index], clip=1.0)
        noise.append(torch.cat([(released.tensors[n] * len(index) - clean[n].sum(0)).flatten() for n in clean]))
    sigma = dp.sigmas["client0"]
    assert dp.sigmas["client1"] == pytest.approx(sigma)  # the same schedule, the same calibration
    for n in noise:  # each release: N(0, (sigma C)^2) per coordinate
        assert n.std().item() == pytest.approx(sigma, rel=0.05)
    assert (noise[0] - noise[1]).std().item() == pytest.approx(math.sqrt(2) * sigma, rel=0.05)
    assert abs(float(torch.corrcoef(torch.stack(noise))[0, 1])) < 0.05


def test_a_remote_client_s_report_composes_into_the_server_s_accountant_as_if_trained_here(fmnist):
    """A ClientApp's DP-SGD (two trainings and an audit gradient) reported in two replies: the server's accountant
    holds the same history as the client's own, so the same epsilon (an RDP accountant stepped by hand agrees)."""
    client = DPSGD(noise_multiplier=1.3)
    data = fmnist.client(0).subset(torch.arange(20))
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    sgd = LocalSGD(epochs=1, lr=0.1, batch_size=5)
    client.train(model, data, client="client0", sgd=sgd, generator=torch.Generator().manual_seed(0))
    first = client.take_report("client0")
    assert client.engines["client0"].accountant.history == []  # the node's record restarts after each report
    client.train(model, data, client="client0", sgd=sgd, generator=torch.Generator().manual_seed(1))
    x, y = data.normalised()[:1], data.labels[:1]
    client.gradient(model, x, y, client="client0", lr=0.1, generator=torch.Generator().manual_seed(2))
    second = client.take_report("client0")
    server = DPSGD(noise_multiplier=1.3)
    trained = PlannedRead("local_sgd", 20, 5, 1)
    server.compose_report("client0", first, planned=[trained])
    server.compose_report("client0", second, planned=[trained, PlannedRead("audit_gradient", 1)])
    assert server.engines["client0"].accountant.history == [(1.3, 0.25, 8), (1.3, 1.0, 1)]
    by_hand = RDPAccountant()
    for _ in range(8):
        by_hand.step(noise_multiplier=1.3, sample_rate=0.25)
    by_hand.step(noise_multiplier=1.3, sample_rate=1.0)
    assert server.epsilons()["client0"] == pytest.approx(by_hand.get_epsilon(delta=1e-5), rel=1e-12)
    assert [r.what for r in server.reads()] == ["local_sgd", "audit_gradient"]
    assert server.uncovered_reads() == []


@pytest.mark.parametrize("report, message", [
    (None, "it sent no record of the reads it made"),
    ("not json", "is not JSON"),
    ('{"reads": [], "events": [[1.3, 0.25, 4]], "extra": 1}', "is not {'reads'"),
    ('{"reads": ["local_sgd"], "events": [[0.5, 0.25, 4]]}', "it reports noise multiplier 0.5; the server planned 1.3"),
    ('{"reads": ["local_sgd"], "events": [[1.3, 0.25, 4.5]]}', "is not \\[sigma, sample rate, steps\\]"),
    ('{"reads": ["local_sgd"], "events": [[1.3, 0.0, 4]]}', "sample rate 0 and 4 steps"),
    ('{"reads": ["local_sgd"], "events": [[1.3, 0.25, 0]]}', "sample rate 0.25 and 0 steps"),
    ('{"reads": ["secrets"], "events": []}', "it reports a read 'secrets'"),
    ('{"reads": [], "events": "' + "x" * 100_001 + '"}', "at most 100,000 characters"),
    # the client's word against the server's plan: 4 steps at rate 0.25 (20 samples, batches of 5, one epoch)
    ('{"reads": ["local_sgd"], "events": []}', "events of no steps; the server planned 4 steps at rate 0.25"),
    ('{"reads": ["local_sgd"], "events": [[1.3, 0.25, 3]]}', "events of 3 steps at rate 0.25; the server planned 4"),
    ('{"reads": ["local_sgd"], "events": [[1.3, 1e-06, 4]]}', "events of 4 steps at rate 1e-06; the server planned"),
    ('{"reads": [], "events": [[1.3, 0.25, 4]]}', r"it reports the reads \[\]; the server planned \['local_sgd'\]"),
])
def test_a_malformed_or_understated_report_is_refused_with_its_reason(report, message):
    with pytest.raises(ValueError, match=message):
        DPSGD(noise_multiplier=1.3).compose_report("client0", report, planned=[PlannedRead("local_sgd", 20, 5, 1)])


def test_the_server_composes_only_the_planned_schedule_and_the_honest_report_passes():
    """The planned report composes; the epsilon is the planned schedule's, computed independently."""
    server = DPSGD(noise_multiplier=1.3)
    planned = [PlannedRead("audit_gradient", 1), PlannedRead("local_sgd", 20, 5, 2)]
    server.compose_report("client0", '{"reads": ["audit_gradient", "local_sgd"], "events": [[1.3, 1.0, 1], '
                                     '[1.3, 0.25, 8]]}', planned=planned)
    assert server.epsilons()["client0"] == pytest.approx(epsilon(1.3, [(1.0, 1), (0.25, 8)], delta=1e-5), rel=1e-12)
