"""Label recovery, payload-to-gradient conversion by name, restarts, and DLG/iDLG end to end."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from privbench.attacks.labels.recovery import recover_labels
from privbench.attacks.reconstruction.dlg import DLG
from privbench.attacks.reconstruction.idlg import IDLG
from privbench.attacks.reconstruction.projection import SubspaceProjection
from privbench.attacks.target import AttackTarget, observed_gradient
from privbench.errors import AttackNotApplicableError
from privbench.fl.sgd import batch_gradient
from privbench.models import ConvNet, LeNet
from privbench.payloads import LocalTraining, Payload

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("idlg_lenet", ROOT / "benchmarks" / "idlg_lenet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_idlg_label_rule_on_hand_built_gradient():
    # Head gradient for one sample: dW = (softmax(z) - onehot(y)) h^T with h >= 0.
    z, y, h = torch.tensor([0.3, -1.0, 2.0, 0.5]), 2, torch.tensor([0.2, 0.9, 0.4])
    dw = torch.outer(torch.softmax(z, 0) - F.one_hot(torch.tensor(y), 4), h)
    assert recover_labels(dw, 1).tolist() == [2]  # the one row with negative entries


def test_batch_label_rule_finds_distinct_labels():
    gen = torch.Generator().manual_seed(0)
    h = 0.5 + 0.5 * torch.rand(3, 6, generator=gen)  # sigmoid-like features of similar size
    z = torch.randn(3, 5, generator=gen)
    ys = torch.tensor([4, 0, 2])
    dw = (torch.softmax(z, 1) - F.one_hot(ys, 5)).T @ h / 3
    assert sorted(recover_labels(dw, 3).tolist()) == [0, 2, 4]


def _payloads(model, x, y, lr=0.1):
    base = Payload.from_tensors(kind="global_model", round=0, sender="server", receiver="client0", tensors=model.state_dict())
    grad = batch_gradient(model, x, y)
    gp = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server", tensors=grad, base=base.id)
    after = {n: base.tensors[n] - lr * grad[n] for n in grad}
    up = Payload.from_tensors(kind="update", round=0, sender="client0", receiver="server", tensors=after, base=base.id,
                              training=LocalTraining(lr=lr, steps=1, batch_size=len(x), num_samples=len(x)))
    return base, gp, up, grad


def test_pseudo_gradient_of_one_full_batch_step_is_the_gradient(fmnist):
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    base, _, up, grad = _payloads(model, fmnist.train.normalised(slice(0, 4)), fmnist.train.labels[:4])
    pseudo = observed_gradient(up, base, list(grad))
    assert all(torch.allclose(pseudo[n], grad[n], atol=1e-4) for n in grad)
    with pytest.raises(AttackNotApplicableError, match="not kept"):
        observed_gradient(up, None, list(grad))


def test_attack_reads_by_name_and_reports_hidden_head(fmnist):
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    base, gp, _, _ = _payloads(model, fmnist.train.normalised(slice(0, 1)), fmnist.train.labels[:1])
    shuffled = {n: gp.tensors[n] for n in reversed(gp.names) if not n.startswith("fc")}
    masked = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server", tensors=shuffled, base=base.id)
    target = AttackTarget.from_payload(masked, base=base, model=model, num_images=1, image_shape=(1, 28, 28), num_classes=10)
    assert set(target.gradient) == {"body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias", "body.4.weight", "body.4.bias"}
    assert target.knowledge["visible_fraction"] == pytest.approx((13426 - 5890) / 13426)
    assert IDLG().label_source(target) == "unknown: optimised jointly"
    full = AttackTarget.from_payload(gp, base=base, model=model, num_images=1, image_shape=(1, 28, 28), num_classes=10)
    assert IDLG().label_source(full) == "recovered"


def test_nan_gradient_is_reported_as_failed_not_garbage(fmnist):
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    base, gp, _, _ = _payloads(model, fmnist.train.normalised(slice(0, 1)), fmnist.train.labels[:1])
    gp.tensors["body.0.weight"][0, 0, 0, 0] = math.nan
    target = AttackTarget.from_payload(gp, base=base, model=model, num_images=1, image_shape=(1, 28, 28), num_classes=10)
    result = IDLG(iterations=5, restarts=2).attack(target, seed=0)
    assert result.failed and [a["status"] for a in result.attempts] == ["nan", "nan"]


def test_attacks_refuse_payloads_they_cannot_read():
    assert "a server-made model carries no client gradient" in IDLG().cannot_read("global_model")
    assert "subspace carries a basis" in IDLG().cannot_read("subspace")
    assert "gradient carries a gradient" in SubspaceProjection().cannot_read("gradient")
    assert DLG().cannot_read("update") is None and SubspaceProjection().cannot_read("subspace") is None


@pytest.mark.slow
def test_idlg_recovers_label_and_image_on_fixed_seeds(fmnist):
    bench = _bench()
    rows = [bench.run_seed(fmnist, seed, iterations=300, restarts=4) for seed in (2, 5, 8)]
    assert all(r["label"] == r["recovered"] for r in rows)
    assert sum(r["psnr"] for r in rows) / len(rows) >= 30.0


@pytest.mark.slow
def test_dlg_reconstructs_one_image(fmnist):
    torch.manual_seed(3)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    x, y = fmnist.train.normalised(slice(10, 11)), fmnist.train.labels[10:11]
    base, gp, _, _ = _payloads(model, x, y)
    target = AttackTarget.from_payload(gp, base=base, model=model, num_images=1, image_shape=(1, 28, 28), num_classes=10)
    result = DLG(iterations=300, restarts=4).attack(target, seed=0)
    assert int(result.labels[0]) == int(y[0])
    mse = F.mse_loss(result.images * 0.353, x * 0.353).item()  # in [0, 1] units
    assert 10 * math.log10(1 / mse) > 25.0


def test_lbfgs_stops_when_steps_stop_changing_anything_and_records_evaluations(fmnist):
    # converged=0 can never be reached: without the stationary stop every attempt would spend its whole budget
    torch.manual_seed(2)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    base, gp, _, _ = _payloads(model, fmnist.train.normalised(slice(2, 3)), fmnist.train.labels[2:3])
    target = AttackTarget.from_payload(gp, base=base, model=model, num_images=1, image_shape=(1, 28, 28), num_classes=10)
    result = IDLG(iterations=2000, restarts=1, converged=0.0, stall_at=1.0).attack(target, seed=0)
    attempt = result.attempts[0]
    assert attempt["status"] == "stationary" and attempt["iterations"] < 2000
    assert attempt["evaluations"] == target.evaluations and attempt["evaluations"] < 20 * attempt["iterations"]


@pytest.mark.parametrize(("model_cls", "stacked"), [
    pytest.param(LeNet, True, id="lenet-stacked"),
    pytest.param(LeNet, False, id="lenet-vmap", marks=pytest.mark.slow),  # 4 s each
    pytest.param(ConvNet, True, id="convnet-stacked", marks=pytest.mark.slow),  # 6-14 s each
])
@pytest.mark.parametrize("hide_head", [False, True])
def test_batched_ig_restarts_equal_running_them_one_by_one(fmnist, hide_head, model_cls, stacked, monkeypatch):
    from privbench.attacks.reconstruction import ig
    from privbench.attacks.reconstruction.ig import InvertingGradients

    monkeypatch.setattr(ig, "STACKED", stacked)
    torch.manual_seed(4)
    model = model_cls(in_channels=1, image_size=28, num_classes=10)
    base, gp, _, _ = _payloads(model, fmnist.train.normalised(slice(5, 7)), fmnist.train.labels[5:7])
    if hide_head:  # labels unknown: label logits are optimised too
        gp = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server", base=base.id,
                                  tensors={n: t for n, t in gp.tensors.items() if not n.startswith("fc")})
    results = {}
    for batched in (False, True):
        target = AttackTarget.from_payload(gp, base=base, model=model, num_images=2, image_shape=(1, 28, 28),
                                           num_classes=10, mean=fmnist.train.mean, std=fmnist.train.std)
        attack = InvertingGradients(iterations=40, restarts=3, batched=batched)
        generators = [torch.Generator().manual_seed(1000 + k) for k in range(3)]
        results[batched] = (attack.batched_attempts(target, generators=generators) if batched else
                            [attack.attempt(target, generator=g) for g in generators], target.evaluations)
    (one_by_one, evals_a), (together, evals_b) = results[False], results[True]
    assert evals_a == evals_b == 3 * 40
    for a, b in zip(one_by_one, together):
        assert torch.allclose(a.images, b.images, atol=1e-4), float((a.images - b.images).abs().max())
        assert torch.equal(a.labels, b.labels) and a.objective == pytest.approx(b.objective, abs=1e-5)


@pytest.mark.parametrize("stacked", [True, False], ids=["stacked", "vmap"])
@pytest.mark.parametrize("hide_head", [pytest.param(False, marks=pytest.mark.slow), True])  # 4-5 s each with the head
def test_ig_on_several_victims_at_once_equals_each_alone(fmnist, hide_head, stacked, monkeypatch):
    from privbench.attacks.reconstruction import ig
    from privbench.attacks.reconstruction.ig import InvertingGradients

    monkeypatch.setattr(ig, "STACKED", stacked)
    def targets() -> list[AttackTarget]:
        out = []
        for seed, start in ((5, 10), (6, 20), (7, 30)):  # each victim has its own base model and images
            torch.manual_seed(seed)
            model = LeNet(in_channels=1, image_size=28, num_classes=10)
            base, gp, _, _ = _payloads(model, fmnist.train.normalised(slice(start, start + 2)),
                                       fmnist.train.labels[start:start + 2])
            if hide_head:
                gp = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server", base=base.id,
                                          tensors={n: t for n, t in gp.tensors.items() if not n.startswith("fc")})
            out.append(AttackTarget.from_payload(gp, base=base, model=model, num_images=2, image_shape=(1, 28, 28),
                                                 num_classes=10, mean=fmnist.train.mean, std=fmnist.train.std))
        return out

    attack = InvertingGradients(iterations=30, restarts=2)
    alone = [attack.attack(t, seed=3) for t in targets()]
    many_targets = targets()
    together = attack.attack_many(many_targets, seed=3)
    assert [t.evaluations for t in many_targets] == [2 * 30] * 3
    for a, b in zip(alone, together):
        # a grouped convolution sums in another order than three alone; 30 Adam steps amplify that rounding to
        # 0.014 of a pixel at one thread (OMP_NUM_THREADS=1), the objectives agreeing to 2e-6; another victim's
        # images would differ by about 1
        assert torch.allclose(a.images, b.images, atol=0.05), float((a.images - b.images).abs().max())
        assert torch.equal(a.labels, b.labels) and a.objective == pytest.approx(b.objective, abs=1e-5)
        assert [x["objective"] for x in a.attempts] == pytest.approx([x["objective"] for x in b.attempts], abs=1e-5)


@pytest.mark.slow
def test_lbfgs_ends_an_attempt_that_stops_improving_as_plateau(fmnist):
    # two images rebuilt as one can never match: the objective levels off well above zero
    torch.manual_seed(1)  # plateau at iteration 33-34 on one thread and two (seed 2 ends stationary on one)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    base, gp, _, _ = _payloads(model, fmnist.train.normalised(slice(0, 2)), fmnist.train.labels[0:2])
    runs = {}
    for patience, iterations in ((0, 40), (15, 150)):
        target = AttackTarget.from_payload(gp, base=base, model=model, num_images=1, image_shape=(1, 28, 28),
                                           num_classes=10)
        runs[patience] = DLG(iterations=iterations, restarts=1, converged=0.0, stall_at=1.0, stall_tol=math.inf,
                             patience=patience).attack(
            target, seed=0).attempts[0]
    attempt = runs[15]
    assert attempt["status"] == "plateau" and 15 < attempt["iterations"] < 150 and attempt["objective"] > 1e-3
    assert runs[0]["status"] == "budget" and runs[0]["iterations"] == 40  # patience 0: never a plateau
