"""GENE-FL's penalty step: the proximal map by hand, the gradient step refused where SGD on the penalty alone
diverges, and both trainers and the stacked trainer taking the step the setting names."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from privbench.data import FederatedData
from privbench.defenses.dpsgd import DPSGD
from privbench.errors import ConfigError
from privbench.fl.fisher import fisher_diagonal
from privbench.fl.genefl.fisher import GeneRegulariser
from privbench.fl.sgd import local_train
from privbench.fl.trainer import LocalSGD
from privbench.fl.vectorised import LocalJob, why_not_stacked
from privbench.models import LeNet


class _Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


def _penalty(model: nn.Module, fisher: dict[str, torch.Tensor], *, step: str, lambda1: float = 0.0,
             lambda2: float = 1.0) -> GeneRegulariser:
    anchor = {n: p.detach().clone() - 0.5 for n, p in model.named_parameters()}
    return GeneRegulariser(anchor=anchor, fisher=fisher, lambda1=lambda1, lambda2=lambda2, eps=1e-6, step=step)


def test_the_proximal_map_is_the_minimiser_of_the_penalty_plus_the_distance_to_the_step():
    """After ``after_step_`` each parameter zeroes the derivative of ``c (t - Theta)^2 + (t - theta)^2 / (2 lr)``:
    ``2 c (t - Theta) + (t - theta) / lr``, with ``c = lambda1 + lambda2 F`` (0 below eps), by hand."""
    model = _Linear()
    fisher = {"fc.weight": torch.tensor([[4.0, 1e-8], [0.5, 12.0], [2.0, 0.0]]),
              "fc.bias": torch.tensor([1.0, 3.0, 1e-9])}
    penalty = _penalty(model, fisher, step="proximal", lambda1=0.25, lambda2=2.0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    penalty.after_step_(model, 0.3)
    for n, p in model.named_parameters():
        c = 0.25 + 2.0 * torch.where(fisher[n] >= 1e-6, fisher[n], torch.zeros_like(fisher[n]))
        slope = 2 * c * (p.detach() - penalty.anchor[n]) + (p.detach() - before[n]) / 0.3
        assert torch.allclose(slope, torch.zeros_like(slope), atol=1e-5), n
        assert (p.detach() != before[n]).all()  # lambda1 > 0 moves every parameter towards its anchor
    grads = copy.deepcopy(model)
    penalty.add_gradient_(grads)  # a proximal penalty adds no gradient
    assert all(p.grad is None for p in grads.parameters())


@pytest.mark.parametrize(("top", "momentum", "refused"), [(10.5, 0.0, True), (9.5, 0.0, False), (14.5, 0.5, False),
                                                           (15.5, 0.5, True)])
def test_a_gradient_step_is_refused_where_sgd_on_the_penalty_alone_diverges(top, momentum, refused):
    """Heavy-ball SGD on ``c (t - Theta)^2`` multiplies ``t - Theta`` by a factor of modulus > 1 where
    ``lr c >= 1 + momentum``: at lr 0.1 that is c >= 10 without momentum and c >= 15 with momentum 0.5."""
    model = _Linear()
    fisher = {"fc.weight": torch.full((3, 2), 0.5).index_put_((torch.tensor(1), torch.tensor(0)), torch.tensor(top)),
              "fc.bias": torch.ones(3)}
    penalty = _penalty(model, fisher, step="gradient")
    if refused:
        with pytest.raises(ConfigError,
                           match=r"fl.lr=0.1: client4's penalty .* on fc.weight .*fl.penalty_step=proximal"):
            penalty.check_stable(lr=0.1, momentum=momentum, client="client4")
    else:
        penalty.check_stable(lr=0.1, momentum=momentum, client="client4")
    _penalty(model, fisher, step="proximal").check_stable(lr=0.1, momentum=momentum, client="client4")  # any lr
    # the bound is real: 30 heavy-ball steps on the penalty alone (curvature 2 top) from 0.5 away
    param, velocity = 0.5, 0.0
    for _ in range(30):
        velocity = momentum * velocity + 2 * top * param
        param = param - 0.1 * velocity
    assert (abs(param) > 0.5) == refused


def test_the_smooth_term_alone_can_pass_the_bound_and_the_message_names_it():
    penalty = GeneRegulariser(anchor={"fc.bias": torch.zeros(3)}, fisher={}, lambda1=10.5, lambda2=0.0, eps=1e-6)
    with pytest.raises(ConfigError, match=r"= 21 on fc.bias.*\(1.05 here\).*below 0.09524, fl.lambda1 or fl.lambda2"):
        penalty.check_stable(lr=0.1, momentum=0.0, client="client0")


def test_the_record_names_the_proximal_step_and_the_replays_read_it():
    """A client's record declares ``proximal_step`` only where it took the map; the attacker's replay and LiRA's
    shadows read it from there (and a record of the paper's step leaves both on the gradient)."""
    from privbench.attacks.membership.shadows import ShadowTraining
    from privbench.attacks.target import Unroll
    from privbench.fl.trainer import LocalTraining

    for step, declared in (("proximal", True), ("gradient", False)):
        penalty = _penalty(_Linear(), {}, step=step, lambda1=0.01)
        assert ("proximal_step" in penalty.settings()) == declared
        record = LocalTraining(lr=0.1, steps=4, batch_size=8, num_samples=32, epochs=1, penalty=penalty.settings(),
                               proximal=penalty.proximal())
        assert Unroll.from_training(record, 32).proximal_step == declared
        assert ShadowTraining.of(record).proximal_step == declared


def _lenet_job(seed: int = 0) -> tuple[nn.Module, FederatedData]:
    data = FederatedData.build(source="fashion_mnist_subset", num_clients=5, partition="shard", classes_per_client=2,
                               seed=seed)
    torch.manual_seed(seed)
    return LeNet(in_channels=1, image_size=28, num_classes=10), data


@pytest.mark.parametrize("trainer", ["sgd", "dpsgd"])
def test_a_stiff_proximal_penalty_pins_the_model_where_its_gradient_step_explodes(trainer):
    """lambda1 = 1e6 at lr 0.1: taken by its proximal map each step ends within 1e-5 of the anchor (plain SGD and
    Opacus DP-SGD alike); taken by its gradient it multiplies the distance by 2e5 - 1 a step and overflows."""
    model, data = _lenet_job()
    client = data.client(0)
    anchor = {n: p.detach().clone() for n, p in model.named_parameters()}
    results = {}
    for step in ("proximal", "gradient"):
        penalty = GeneRegulariser(anchor=anchor, fisher={}, lambda1=1e6, lambda2=0.0, eps=1e-6, step=step)
        local = copy.deepcopy(model)
        sgd = LocalSGD(epochs=1, lr=0.1, batch_size=32)
        if trainer == "sgd":
            local_train(local, client, epochs=1, lr=0.1, batch_size=32, generator=torch.Generator().manual_seed(1),
                        regulariser=penalty)
        else:
            DPSGD(noise_multiplier=0.5, max_grad_norm=1.0).train(local, client, client="client0", sgd=sgd,
                                                               generator=torch.Generator().manual_seed(1),
                                                               regulariser=penalty)
        results[step] = max(float((p.detach() - anchor[n]).abs().max()) for n, p in local.named_parameters())
    assert results["proximal"] < 1e-5
    assert not np.isfinite(results["gradient"]) or results["gradient"] > 1e6


def test_a_proximal_penalty_trains_one_client_at_a_time_in_a_stacked_round():
    model, data = _lenet_job()
    jobs = []
    for c in range(2):
        local = copy.deepcopy(model)
        anchor = {n: p.detach().clone() for n, p in local.named_parameters()}
        penalty = GeneRegulariser(anchor=anchor, fisher=fisher_diagonal(local, data.client(c)), lambda1=0.01,
                                  lambda2=1.0, eps=1e-6, step="proximal")
        jobs.append(LocalJob(model=local, data=data.client(c), client=f"client{c}",
                             generator=torch.Generator().manual_seed(c), regulariser=penalty))
    assert "proximal map" in str(why_not_stacked(jobs))


def _genefl_run(tmp_path, **kwargs):
    from privbench.fl.protocols.genefl import GeneFL
    from privbench.fl.wire import Wire
    from privbench.payloads import CapturePolicy, PayloadStore
    from privbench.victim import Victim

    model, data = _lenet_job()
    protocol = GeneFL(rounds=1, participants=3, local_epochs=1, lr=0.1, batch_size=32, num_clusters=2, subspace_dim=3,
                      gene={"gamma": 2}, agnostic={"epochs": 1, "fedavg_reference": False}, **kwargs)
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path / "payloads"),
                             CapturePolicy.build(victim_round=0, victim_client=0, rounds="all", clients="all"))
    protocol.run(model=model, data=data, victim=Victim(client=0, round=0), wire=wire, seed=0)
    return wire


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_a_genefl_run_whose_penalty_step_diverges_is_refused_and_runs_with_the_proximal_map(tmp_path):
    """lambda2 = 50 on LeNet at lr 0.1 (its Fisher reaches well above 0.2 at initialisation): refused in round 0
    under the paper's gradient step; with fl.penalty_step=proximal every upload is finite and its training record
    declares the proximal step, which the server checks against its plan."""
    with pytest.raises(ConfigError, match=r"client\d's penalty has curvature .*fl.penalty_step=proximal"):
        _genefl_run(tmp_path / "gradient", lambda2=50.0)
    wire = _genefl_run(tmp_path / "proximal", lambda2=50.0, penalty_step="proximal")
    uploads = list(wire.store.records(kind="learngene"))
    assert len(uploads) == 3
    for record in uploads:
        payload = wire.store.load(record["id"])
        assert payload.training is not None and payload.training.penalty["proximal_step"] == 1.0
        assert all(bool(torch.isfinite(t).all()) for t in payload.tensors.values())


def test_an_unknown_penalty_step_is_refused_by_name():
    from privbench.fl.protocols.genefl import GeneFL

    with pytest.raises(ConfigError, match=r"fl.penalty_step='implicit' is not one of gradient, proximal"):
        GeneFL(rounds=1, participants=1, local_epochs=1, lr=0.1, batch_size=8, penalty_step="implicit")
