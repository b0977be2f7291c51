"""Defences (noise, pruning, Opacus DP-SGD): mechanisms, accounting, and effect on leakage."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from opacus.accountants import RDPAccountant

from privbench.audit.run import run_audit
from privbench.defenses.dpsgd import DPSGD
from privbench.defenses.noise import GaussianNoise
from privbench.defenses.none import NoDefense
from privbench.defenses.prune import Prune, keep_top
from privbench.errors import ConfigError
from privbench.fl.trainer import LocalSGD, Trainer
from privbench.models import LeNet
from privbench.payloads import Payload, kinds_where
from privbench.payloads.transform import MessageTransform

TINY = ["fl=fedavg", "payload=gradient", "data.partition=iid", "data.num_clients=4", "data.agnostic_classes=[]",
        "fl.rounds=1", "fl.participants=2", "fl.local_epochs=1", "metrics.lpips=false", "attack.iterations=100",
        "attack.restarts=2"]


def _payload(kind, tensors, base=None):
    return Payload.from_tensors(kind=kind, round=0, sender="client0", receiver="server", tensors=tensors, base=base)


def test_keep_top_by_hand_and_p1_identity():
    t = torch.tensor([[0.5, -2.0], [1.0, 0.1]])
    assert torch.equal(keep_top(t, 0.5), torch.tensor([[0.0, -2.0], [1.0, 0.0]]))
    p = _payload("gradient", {"w": t})
    assert Prune(p=1.0).protect(p) is p


def test_pruning_a_model_upload_prunes_its_change():
    base = {"w": torch.tensor([1.0, 1.0, 1.0, 1.0])}
    up = _payload("update", {"w": torch.tensor([1.1, 3.0, 0.9, 1.0])})
    out = Prune(p=0.25).protect(up, base)
    assert torch.allclose(out.tensors["w"], torch.tensor([1.0, 3.0, 1.0, 1.0]))  # only the largest change survives
    assert out.nbytes == up.nbytes and out.id == up.id


def test_noise_is_seeded_and_has_the_right_scale():
    p = _payload("gradient", {"w": torch.zeros(100_000)})
    a, b = GaussianNoise(sigma=0.1, seed=3).protect(p), GaussianNoise(sigma=0.1, seed=3).protect(p)
    assert torch.equal(a.tensors["w"], b.tensors["w"])
    assert a.tensors["w"].std().item() == pytest.approx(0.1, rel=0.02)
    assert not torch.equal(a.tensors["w"], GaussianNoise(sigma=0.1, seed=4).protect(p).tensors["w"])


def test_defences_come_in_two_shapes():
    assert isinstance(DPSGD(), Trainer) and not isinstance(DPSGD(), MessageTransform)
    assert all(isinstance(d, MessageTransform) for d in (GaussianNoise(), Prune(), NoDefense()))


@pytest.mark.parametrize("defense", [GaussianNoise(sigma=0.01), Prune(p=0.3), NoDefense()])
@pytest.mark.parametrize("kind", kinds_where(direction="up"))
def test_every_transform_composes_with_every_uplink_kind(defense, kind):
    tensors = {"a": torch.randn(4, 3), "b": torch.randn(3), "n": torch.tensor([7])}
    base = {n: t.clone() for n, t in tensors.items()}
    out = defense.protect(_payload(kind, tensors), base)
    assert out.names == ["a", "b", "n"] and all(out.tensors[n].shape == tensors[n].shape for n in tensors)
    assert torch.equal(out.tensors["n"], tensors["n"])  # integer tensors pass unchanged


def test_dp_epsilon_equals_opacus_accountant_computed_independently(fmnist):
    dp = DPSGD(noise_multiplier=1.1, max_grad_norm=1.0, delta=1e-5)
    data = fmnist.client(0).subset(torch.arange(64))
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    sgd = LocalSGD(epochs=1, lr=0.1, batch_size=16, momentum=0.0)
    steps = [dp.train(model, data, client="client0", sgd=sgd, generator=torch.Generator().manual_seed(r)).steps
             for r in range(2)]
    assert steps == [4, 4]  # Poisson loader: 1 / sample_rate batches per epoch
    independent = RDPAccountant()
    for _ in range(sum(steps)):
        independent.step(noise_multiplier=1.1, sample_rate=16 / 64)
    assert dp.epsilons()["client0"] == pytest.approx(independent.get_epsilon(delta=1e-5), rel=1e-9)
    assert len(dp.engines) == 1  # one persistent accountant per client


def test_batchnorm_model_with_dpsgd_fails_before_training(compose_cfg, tmp_path):
    cfg = compose_cfg(*TINY, "defense=dpsgd", "model=resnet18", "model.norm=bn")
    with pytest.raises(ConfigError, match="model.norm=gn"):
        run_audit(cfg, tmp_path)
    assert not (tmp_path / "payloads").exists()


@pytest.mark.slow
def test_dp_and_noise_lower_idlg_leakage_on_the_gradient(compose_cfg, tmp_path):
    psnr = {}
    for defense in ("none", "dpsgd", "noise"):
        cfg = compose_cfg(*TINY, f"defense={defense}", f"results_dir={tmp_path}")
        psnr[defense] = run_audit(cfg, tmp_path / defense)["privacy"]["psnr_mean"]
    assert psnr["none"] > 30
    assert psnr["dpsgd"] < psnr["none"] - 10 and psnr["noise"] < psnr["none"] - 10
    metrics = run_audit(compose_cfg(*TINY, "defense=dpsgd", f"results_dir={tmp_path}", "resume=false"), tmp_path / "again")
    assert math.isfinite(metrics["defense"]["epsilon"]) and metrics["defense"]["epsilon"] > 0
    assert metrics["defense"]["epsilon_per_client"]["client0"] == metrics["defense"]["epsilon"]


def test_noise_gives_equal_noise_to_signal_on_a_gradient_and_its_one_step_update(fmnist):
    """sigma is in (pseudo-)gradient units: the update -lr*g of one SGD step gets lr*sigma on its change."""
    from privbench.fl.sgd import batch_gradient, parameters_of
    from privbench.payloads import LocalTraining

    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    data = fmnist.client(0)
    x, y = data.normalised(torch.arange(4)), data.labels[:4]
    grad = batch_gradient(model, x, y)
    lr, sigma = 0.1, 0.05
    base = parameters_of(model)
    after = {n: base[n] - lr * grad[n] if n in grad else base[n] for n in base}
    record = LocalTraining(lr=lr, steps=1, batch_size=4, num_samples=4)
    noise = GaussianNoise(sigma=sigma, seed=0)
    on_grad = noise.protect(_payload("gradient", grad))
    on_update = noise.protect(dataclasses.replace(_payload("update", after, base="b"), training=record), base)

    def ratio(noisy, clean):
        num = sum(float(((noisy[n] - clean[n]) ** 2).sum()) for n in grad)
        return math.sqrt(num / sum(float((clean[n] ** 2).sum()) for n in grad))

    pseudo = {n: -(on_update.tensors[n] - base[n]) / lr for n in grad}
    expected = sigma * math.sqrt(sum(g.numel() for g in grad.values())) / math.sqrt(
        sum(float((g**2).sum()) for g in grad.values()))  # hand-computed noise-to-signal of N(0, sigma^2)
    assert ratio(on_grad.tensors, grad) == pytest.approx(expected, rel=0.02)
    assert ratio(pseudo, grad) == pytest.approx(expected, rel=0.02)
    assert "pseudo-gradient" in on_update.protection and "each value" in on_grad.protection
