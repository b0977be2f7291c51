"""SPEAR: exact batch recovery from the first linear layer's gradient, and its certificate (attacks/reconstruction)."""
from __future__ import annotations

import pytest
import torch

from privbench.attacks.labels.views import LabelView
from privbench.attacks.reconstruction import exact
from privbench.attacks.reconstruction.spear import SPEAR, Factors
from privbench.attacks.target import AttackTarget
from privbench.audit.games.reconstruction import certificate_figures
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.errors import AttackNotApplicableError
from privbench.models import MLP, LeNet
from privbench.pixels import normalise


def batch(size: int, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    train = load_fashion_mnist_subset(train=True)
    images = normalise(train.images[offset:offset + size].float() / 255, train.mean, train.std)
    return images, train.labels[offset:offset + size]


def target(images: torch.Tensor, labels: torch.Tensor, *, seed: int = 0, hidden: tuple[int, ...] = (100, 100),
           drop: str = "") -> tuple[AttackTarget, MLP]:
    torch.manual_seed(seed)
    net = MLP(in_channels=1, image_size=28, num_classes=10, hidden=hidden)
    loss = torch.nn.functional.cross_entropy(net(images), labels)
    grads = torch.autograd.grad(loss, list(net.parameters()))
    gradient = {n: g.detach() for (n, _), g in zip(net.named_parameters(), grads) if n != drop}
    return AttackTarget(model=net, gradient=gradient, num_images=len(images), image_shape=(1, 28, 28),
                        num_classes=10), net


def public_view(t: AttackTarget) -> LabelView:
    test, train = load_fashion_mnist_subset(train=False), load_fashion_mnist_subset(train=True)
    return LabelView.from_test_split(t, test.images, test.labels, count=500, seed=0, mean=train.mean, std=train.std)


def test_a_batch_is_rebuilt_exactly_and_every_image_certified():
    images, labels = batch(6)
    t, _ = target(images, labels)
    found = SPEAR(samples=200_000).attack(public_view(t), seed=0)
    assert not found.failed and found.info["certified"] == [True] * 6
    order = torch.cdist(found.images.flatten(1), images.flatten(1)).argmin(1)
    assert sorted(order.tolist()) == list(range(6))  # one rebuilt image per true one
    assert (found.images - images[order]).abs().max() < 1e-3  # exact up to float32 round-off
    assert found.labels.tolist() == labels[order].tolist()


def test_a_one_step_update_is_inverted_as_its_gradient():
    images, labels = batch(5, offset=40)
    t, net = target(images, labels, seed=1)
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    loss = torch.nn.functional.cross_entropy(net(images), labels)
    for p, g in zip(net.parameters(), torch.autograd.grad(loss, list(net.parameters()))):
        p.data -= 0.05 * g
    pseudo = {n: -(p.detach() - before[n]) / 0.05 for n, p in net.named_parameters()}  # what the server reads
    for n, p in net.named_parameters():
        p.data.copy_(before[n])
    t.gradient = pseudo
    found = SPEAR(samples=200_000, prior="uniform").attack(t, seed=0)
    order = torch.cdist(found.images.flatten(1), images.flatten(1)).argmin(1)
    assert (found.images - images[order]).abs().max() < 5e-3
    assert sum(found.info["certified"]) >= 4  # the update's float32 round-off may cost a value check, never a wrong one


def test_a_direction_mixed_from_two_inputs_is_never_certified():
    images, labels = batch(5, offset=80)
    t, net = target(images, labels, seed=2)
    layer = net.body[1]
    a, v, _ = exact.factor(t.gradient["body.1.weight"], 5)
    live = a.norm(dim=1) > 1e-9 * a.norm(dim=1).max()
    pre = (images.flatten(1) @ layer.weight.T + layer.bias).detach().requires_grad_(True)
    out = net.fc(net.body[4](net.body[3](torch.relu(pre))))
    true_out = torch.autograd.grad(torch.nn.functional.cross_entropy(out, labels), pre)[0].T.double()
    q = torch.linalg.lstsq(a, true_out).solution.T  # the true directions, one per row
    factors = Factors(t, layer, a, v, live, t.gradient["body.1.bias"].double())
    truth = factors.solve(list(q))
    assert truth is not None and truth.count == 5 and (truth.inputs.float() - images.flatten(1)).abs().max() < 1e-3
    mixed = factors.solve([q[0] + 0.5 * q[1], *q[1:]])
    assert mixed is not None and not mixed.certified[0] and not mixed.certified[1]
    for k in torch.nonzero(mixed.certified)[:, 0].tolist():  # what it still certifies is exact
        assert (mixed.inputs[k].float() - images.flatten(1)[k]).abs().max() < 1e-3


def test_a_spent_budget_fails_and_says_how_far_it_got():
    images, labels = batch(12, offset=120)
    t, _ = target(images, labels)
    found = SPEAR(samples=20, chunk=10, prior="uniform").attack(t, seed=0)
    assert found.failed and found.info["exact"]["samples"] == 20 and found.info["exact"]["directions"] < 12


def test_what_it_cannot_invert_is_refused_in_one_line():
    with pytest.raises(AttackNotApplicableError, match="fully connected"):
        SPEAR().check_model(LeNet(in_channels=1, image_size=28, num_classes=10), (1, 28, 28))
    images, labels = batch(3)
    t, _ = target(images, labels, drop="body.1.bias")
    with pytest.raises(AttackNotApplicableError, match="body.1.bias"):
        SPEAR().attack(t, seed=0)
    with pytest.raises(AttackNotApplicableError, match="max_images=2"):
        SPEAR(max_images=2).attack(t, seed=0)
    with pytest.raises(ValueError, match="attack.prior"):
        SPEAR(prior="gaussian")
    narrow, _ = target(*batch(6), hidden=(4, 4))
    with pytest.raises(AttackNotApplicableError, match=r"at most as many images as body.1 has units \(4\)"):
        SPEAR().attack(narrow, seed=0)
    scaled, net = target(images, labels)
    net.register_forward_pre_hook(lambda _m, inputs: (inputs[0] * 0.5 + 0.1,))  # e.g. a raw-pixel wrapper
    with pytest.raises(AttackNotApplicableError, match="changes its input before body.1"):
        SPEAR().attack(scaled, seed=0)


def test_the_certificate_is_scored_against_the_nearest_true_image():
    truth = torch.stack([torch.full((1, 2, 2), v) for v in (0.1, 0.5, 0.9)])
    recon = torch.stack([truth[2], truth[0] + 0.02, truth[1] + 0.3])  # exact, 34 dB off, 10 dB off
    assert certificate_figures([True, True, False], recon, truth) == {"certified_fraction": 2 / 3,
                                                                      "certified_wrong": 1}
    assert certificate_figures([True, False, False], recon, truth[:2])["certified_wrong"] == 1  # its truth absent


@pytest.mark.slow  # one FedAvg round on the 2NN and the attack: about 15 s
def test_an_audit_rebuilds_a_fedavg_gradients_batch_and_certifies_it(tmp_path):
    import json

    import privbench

    run = privbench.run(["attack=spear", "model=mlp", "fl=fedavg", "payload=gradient", "fl.rounds=1",
                         "victim.num_images=8", "metrics.lpips=false"], results_dir=tmp_path)
    privacy, threat = run.metrics["privacy"], json.loads((run.run_dir / "threat_model.json").read_text())
    assert privacy["recovered_fraction"] == 1.0 and privacy["psnr_mean"] > 50  # the metric caps an exact image
    assert privacy["certified_fraction"] == 1.0 and privacy["certified_wrong"] == 0
    assert privacy["label_accuracy"] == 1.0
    assert threat["attack_budget"]["samples"] == 2_000_000 and threat["attack_budget"]["prior"] == "public"
