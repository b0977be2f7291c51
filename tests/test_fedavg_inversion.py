"""FedAvg-aware inversion: its epoch layout by hand, the order-invariant prior, the merge of copies, an exact replay of
a GENE-FL client's Fisher-elastic round, and the attack end to end on a plain-PyTorch update of known construction."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from privbench.attacks.labels.views import LabelView
from privbench.attacks.reconstruction.fedavg_inversion import (
    FedAvgInversion,
    epoch_prior,
    epoch_schedule,
    epochs_of,
    match_copies,
    matched_prior,
    merge_copies,
)
from privbench.attacks.reconstruction.ig import InvertingGradients
from privbench.attacks.reconstruction.matching import candidate_gradient
from privbench.attacks.target import AttackTarget, Part, Unroll
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.errors import AttackNotApplicableError
from privbench.fl.fisher import fisher_diagonal
from privbench.fl.genefl.fisher import GeneRegulariser
from privbench.fl.sgd import local_train
from privbench.metrics.reconstruction import score
from privbench.models import MLP, LeNet
from privbench.pixels import bounds, denormalise, normalise


def test_each_epoch_has_its_own_copy_and_its_batches_in_order():
    part = Part(0, 10, steps=6, batch_size=4)
    assert epochs_of(part) == 2
    assert [(s.start, s.stop) for s in epoch_schedule(part, 3)] == [(3, 7), (7, 11), (11, 13), (13, 17), (17, 21),
                                                                     (21, 23)]
    assert epochs_of(Part(0, 10, steps=4, batch_size=4)) == 2  # a cut-short last epoch still has a copy


def test_the_epoch_prior_ignores_order_within_an_epoch_and_sees_different_sets():
    images = torch.rand(4, 1, 5, 5)
    shuffled = torch.stack([images, images[[2, 0, 3, 1]], images[[3, 2, 1, 0]]])
    assert float(epoch_prior(shuffled)) == pytest.approx(0.0, abs=1e-12)
    other = shuffled.clone()
    other[1, 0] += 1.0  # one image of epoch 1 differs: its mean moves by 1/4 per pixel
    # pairs (0,1), (1,0), (1,2), (2,1) differ by 1/16 in squared mean; 6 ordered pairs
    assert float(epoch_prior(other)) == pytest.approx(4 * (1 / 16) / 6, rel=1e-5)


def test_the_matched_prior_is_zero_for_the_same_images_in_any_order_and_measures_a_stray_copy():
    images = torch.rand(4, 1, 5, 5)
    labels = torch.tensor([0, 1, 1, 2])
    copies = torch.stack([images, images[[0, 2, 1, 3]], images])
    assert float(matched_prior(copies, match_copies(copies, labels))) == pytest.approx(0.0, abs=1e-12)
    stray = copies.clone()
    stray[2, 3] += 0.3  # one copy off by 0.3 per pixel: deviations 0.2 there, 0.1 in the two others, over 3 epochs
    expected = (0.2 ** 2 + 2 * 0.1 ** 2) / (3 * 4) * 3
    assert float(matched_prior(stray, match_copies(stray, labels))) == pytest.approx(expected, rel=1e-4)


def test_copies_in_another_order_are_matched_within_their_label_and_averaged():
    truth = torch.rand(5, 1, 6, 6)
    labels = torch.tensor([0, 0, 1, 1, 2])
    noise = torch.randn(3, 5, 1, 6, 6, generator=torch.Generator().manual_seed(0)) * 0.01
    copies = torch.stack([truth, truth[[1, 0, 3, 2, 4]], truth[[1, 0, 2, 3, 4]]]) + noise
    merged = merge_copies(copies, labels)
    expected = truth + torch.stack([noise[0], noise[1][[1, 0, 3, 2, 4]], noise[2][[1, 0, 2, 3, 4]]]).mean(0)
    assert torch.allclose(merged, expected, atol=1e-6)


def _client(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    train = load_fashion_mnist_subset(train=True)
    rows = torch.from_numpy(np.random.default_rng(seed).choice(len(train.labels), n, replace=False))
    return train.images[rows].float() / 255.0, normalise(train.images[rows].float() / 255.0, train.mean, train.std), \
        train.labels[rows]


@pytest.mark.parametrize(("step", "lambda2"), [("gradient", 5.0), ("proximal", 50.0)])  # the first below the bound
def test_a_genefl_round_replays_exactly_with_its_fisher_elastic_term(step, lambda2):
    """The client's own GENE-FL round (Fisher on its data, lambda1 and lambda2 penalty, shuffled epochs; the penalty
    by its gradient or by its proximal map) is replayed on its true images laid out epoch by epoch in its batch
    order: the same update to float tolerance; without the elastic term it is not."""
    train = load_fashion_mnist_subset(train=True)
    data = train.subset(torch.from_numpy(np.random.default_rng(0).choice(len(train.labels), 12, replace=False)))
    x, y = data.normalised(), data.labels
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    fisher = fisher_diagonal(model, data)
    penalty = GeneRegulariser(anchor=start, fisher=fisher, lambda1=0.01, lambda2=lambda2, eps=1e-6, step=step)
    penalty.check_stable(lr=0.1, momentum=0.0, client="client0")  # a round the client takes
    client = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(5)
    steps = local_train(client, data, epochs=2, lr=0.1, batch_size=4, generator=generator, regulariser=penalty)
    observed = {n: -(p.detach() - start[n]) / (0.1 * steps) for n, p in client.named_parameters()}
    again = torch.Generator().manual_seed(5)
    order = torch.cat([torch.randperm(12, generator=again) for _ in range(2)])  # the batches local_train drew
    part = Part(0, 12, steps, 4)
    spec = Unroll(0.1, steps, proximal=0.01, parts=(part,), proximal_step=step == "proximal")
    target = AttackTarget(model, observed, 12, (1, 28, 28), 10, unroll=spec)
    plain = candidate_gradient(target, x[order], labels=y[order], schedule=[epoch_schedule(part, 0)])
    target.unroll = spec.with_elastic({"lambda2": lambda2, "eps": 1e-6})
    replayed = candidate_gradient(target, x[order], labels=y[order], schedule=[epoch_schedule(part, 0)])
    for n in observed:
        assert torch.allclose(replayed[n], observed[n], atol=2e-5, rtol=1e-4), n
    gap = max(float((plain[n] - observed[n]).detach().abs().max()) for n in observed)
    assert gap > 1e-3  # the elastic term matters at this weight


def _update(n: int, epochs: int, batch: int, lr: float, seed: int) -> tuple[AttackTarget, LabelView, torch.Tensor,
                                                                            torch.Tensor]:
    """A plain-PyTorch FedAvg client's update (shuffled epochs) as the attacker sees it, its public data and truth."""
    train, test = load_fashion_mnist_subset(train=True), load_fashion_mnist_subset(train=False)
    pixels, x, y = _client(n, seed)
    torch.manual_seed(seed)
    model = MLP(in_channels=1, image_size=28, num_classes=10)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    client = copy.deepcopy(model)
    optimiser = torch.optim.SGD(client.parameters(), lr=lr)
    generator, steps = torch.Generator().manual_seed(seed + 100), 0
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        for s in range(0, n, batch):
            optimiser.zero_grad()
            F.cross_entropy(client(x[order[s:s + batch]]), y[order[s:s + batch]]).backward()
            optimiser.step()
            steps += 1
    observed = {k: -(client.state_dict()[k] - start[k]) / (lr * steps) for k in start}
    training = {"lr": lr, "steps": steps, "batch_size": batch, "num_samples": n, "epochs": epochs}
    target = AttackTarget(model, observed, n, (1, 28, 28), 10, bounds(train.mean, train.std),
                          Unroll(lr, steps, parts=(Part(0, n, steps, batch),)),
                          knowledge={"payload": "plain", "training": training, "matching": "unrolled local training"})
    rows = torch.randperm(len(test.labels), generator=torch.Generator().manual_seed(1))[:1000]
    public = normalise(test.images[rows].float() / 255.0, train.mean, train.std)
    return target, LabelView(target, public, test.labels[rows]), pixels, y


def _psnrs(found, pixels: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    train = load_fashion_mnist_subset(train=True)
    recon = denormalise(found.images, train.mean, train.std).clamp(0, 1)
    rows = score(recon, pixels, recon_labels=found.labels, truth_labels=y, use_lpips=False)["matched"]
    return np.array([r["psnr"] for r in rows])


@pytest.mark.slow
def test_it_rebuilds_a_shuffled_multi_epoch_update_that_the_in_order_unroll_does_not():
    """FedAvg's 2NN, 10 images in 5 epochs of 2 batches of 5 reshuffled every epoch, SGD lr 0.004 (seed 0), one
    attempt of 400 steps each: the FedAvg-aware inversion (matched prior, weight 0.3) rebuilds 9 of 10 images to 20 dB
    with the counts exact (measured: median 34.0 dB; IG's in-order unroll 24.2 dB)."""
    target, view, pixels, y = _update(10, 5, 5, 0.004, 0)
    found = FedAvgInversion(iterations=400, restarts=1, prior=0.3, tie="matched").attack(view, seed=0)
    assert found.info["label_counts"] == {int(c): int(k) for c, k in enumerate(np.bincount(y.numpy(), minlength=10))
                                          if k}
    ours = _psnrs(found, pixels, y)
    target_ig, _, _, _ = _update(10, 5, 5, 0.004, 0)
    baseline = _psnrs(InvertingGradients(iterations=400, restarts=1, unroll=True).attack(target_ig, seed=0),
                      pixels, y)
    assert (ours >= 20.0).sum() >= 9 and np.median(ours) > 30.0, ours
    assert np.median(ours) > np.median(baseline) + 5.0, (ours, baseline)


def test_a_gradient_or_a_message_without_training_is_refused_in_one_line(compose_cfg):
    from privbench.audit.plan import plan

    with pytest.raises(AttackNotApplicableError, match="cannot attack payload=gradient"):
        plan(compose_cfg("attack=fedavg_inversion", "fl=fedavg", "payload=gradient"))
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    target = AttackTarget(model, {"fc.bias": torch.zeros(10)}, 2, (1, 28, 28), 10, knowledge={"payload": "p"})
    with pytest.raises(AttackNotApplicableError, match="declares none"):
        FedAvgInversion().attack(LabelView(target, torch.zeros(1, 1, 28, 28), torch.zeros(1, dtype=torch.long)),
                                 seed=0)


@pytest.mark.slow
def test_the_study_setting_runs_end_to_end_and_records_what_the_attack_was_given(compose_cfg, tmp_path):
    from privbench.audit.run import run_audit

    cfg = compose_cfg("experiment=fedavg_leakage", "+experiment/fedavg_leakage=matched_prior", "victim.num_images=10",
                      "fl.local_epochs=2", "attack.iterations=20", f"results_dir={tmp_path}")
    metrics = run_audit(cfg, tmp_path / "run")
    threat, privacy = metrics["threat_model"], metrics["privacy"]
    assert threat["matching"] == "unrolled local training" and threat["training"]["steps"] == 4
    assert threat["attack_budget"] == {"attack": "fedavg_inversion", "iterations": 20, "restarts": 1,
                                       "optimiser": "signed Adam", "lr": 0.1, "tv": 0.001, "epoch_prior": 0.03,
                                       "tie": "matched", "label_points": 8, "labels": "counts"}
    assert threat["labels"].startswith("per-class counts recovered")
    assert privacy["label_source"] == "recovered counts" and privacy["num_reconstructed"] == 10
    assert privacy["num_true"] == 10


def test_an_oracle_row_lays_the_true_counts_out_and_a_wrong_total_is_refused():
    target, view, _, y = _update(10, 2, 5, 0.004, 0)
    true = torch.bincount(y, minlength=10)
    view.oracle_counts = true
    inversion = FedAvgInversion(iterations=2, restarts=1, labels="oracle")
    found = inversion.attack(view, seed=0)
    assert found.info["label_counts"] == {c: int(k) for c, k in enumerate(true.tolist()) if k}
    assert sorted(found.labels.tolist()) == sorted(y.tolist()) and found.label_source == "given: true counts (oracle)"
    assert target.knowledge["oracle"].startswith("ORACLE") and target.labels is None  # laid out by the attack
    _, wrong, _, _ = _update(10, 2, 5, 0.004, 0)
    wrong.oracle_counts = true + 1
    with pytest.raises(AttackNotApplicableError, match="add up to 20 images, not the batch's 10"):
        inversion.attack(wrong, seed=0)
    with pytest.raises(ValueError, match="attack.labels one of counts, oracle"):
        FedAvgInversion(labels="sign")
