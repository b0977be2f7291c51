"""LiRA: shadow client-rounds against plain PyTorch training (GENE-FL's penalty included), the likelihood ratio
and the shadows' datasets by hand, the refusals before training, and the attack end to end on an overfit update."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats

import privbench
from privbench.api import preflight
from privbench.attacks.membership.lira import likelihood_ratio, logit_confidence, offline_score, shadow_datasets
from privbench.attacks.membership.shadows import ShadowTraining, train_shadows
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.errors import AttackNotApplicableError
from privbench.fl.fisher import fisher_diagonal
from privbench.fl.genefl.fisher import GeneRegulariser
from privbench.fl.sgd import local_train
from privbench.models.lenet import LeNet
from privbench.payloads import LocalTraining

#: The overfit client of tests/test_membership.py on LeNet: 80 images, 30 epochs of batch 8, round 1's update.
OVERFIT = ["fl=fedavg", "payload=update", "victim.update_data=all", "fl.local_epochs=30", "data.num_clients=60",
           "data.partition=iid", "fl.participants=5", "fl.rounds=2", "victim.round=1", "fl.batch_size=8",
           "metrics.lpips=false"]


def _plain_training(model, base, plan, x, y, rows, orders):
    """One shadow trained as a client trains: torch.optim.SGD, GENE-FL's penalty gradient added to each step's,
    its Fisher computed record by record at the received model (eval mode)."""
    local = copy.deepcopy(model)
    local.load_state_dict({**local.state_dict(), **base})
    local.eval()
    fisher = {n: torch.zeros_like(p) for n, p in local.named_parameters()}
    for i in rows.tolist():
        loss = F.cross_entropy(local(x[i:i + 1]), y[i:i + 1])
        for (n, _), g in zip(local.named_parameters(), torch.autograd.grad(loss, list(local.parameters()))):
            fisher[n] += g * g / len(rows)
    weight = {n: torch.where(f >= plan.eps, f, torch.zeros_like(f)) for n, f in fisher.items()}
    local.train()
    opt = torch.optim.SGD(local.parameters(), lr=plan.lr, momentum=plan.momentum)
    for order in orders:
        for first in range(0, len(rows), plan.batch_size):
            batch = rows[order[first:first + plan.batch_size]]
            opt.zero_grad()
            F.cross_entropy(local(x[batch]), y[batch]).backward()
            with torch.no_grad():
                for n, p in local.named_parameters():
                    p.grad += 2 * (plan.lambda1 + plan.lambda2 * weight[n]) * (p - base[n])
            opt.step()
    return {n: p.detach() for n, p in local.named_parameters()}


@pytest.mark.parametrize("lambda2", [0.0, 1.0])
def test_stacked_shadows_train_as_plain_pytorch_does(lambda2):
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    x, y = torch.randn(30, 1, 28, 28), torch.randint(0, 10, (30,))
    plan = ShadowTraining(lr=0.2, epochs=2, batch_size=4, momentum=0.5, lambda1=0.01, lambda2=lambda2, eps=1e-6)
    datasets = torch.stack([torch.randperm(30, generator=torch.Generator().manual_seed(k))[:10] for k in range(3)])
    got = train_shadows(model, base, plan, x, y, datasets, torch.Generator().manual_seed(5))
    again = torch.Generator().manual_seed(5)  # the shadows' epoch orders, drawn as train_shadows draws them
    orders = [torch.argsort(torch.rand(3, 10, generator=again), dim=1) for _ in range(plan.epochs)]
    moved = 0.0
    for k in range(3):
        want = _plain_training(model, base, plan, x, y, datasets[k], [o[k] for o in orders])
        for n in want:
            assert torch.allclose(got[n][k], want[n], atol=1e-5), (k, n, float((got[n][k] - want[n]).abs().max()))
            moved = max(moved, float((want[n] - base[n]).abs().max()))
    assert moved > 0.05  # the shadows did train


@pytest.mark.parametrize(("step", "lambda2"), [("gradient", 1.0), ("proximal", 20.0)])
def test_a_shadow_on_the_client_s_data_is_the_client_s_genefl_round(step, lambda2):
    """GENE-FL's own client round (its trainer, its Fisher on its data, lambda1 and lambda2, momentum; the penalty by
    its gradient or its proximal map), full-batch so the order does not matter, against a shadow given the same 12
    records and the round's record."""
    train = load_fashion_mnist_subset(train=True)
    data = train.subset(torch.from_numpy(np.random.default_rng(0).choice(len(train.labels), 12, replace=False)))
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    penalty = GeneRegulariser(anchor=start, fisher=fisher_diagonal(model, data), lambda1=0.01, lambda2=lambda2,
                              eps=1e-6, step=step)
    client = copy.deepcopy(model)
    steps = local_train(client, data, epochs=3, lr=0.1, batch_size=12, momentum=0.5,
                        generator=torch.Generator().manual_seed(5), regulariser=penalty)
    record = LocalTraining(lr=0.1, steps=steps, batch_size=12, num_samples=12, epochs=3, momentum=0.5,
                           penalty=penalty.settings(), proximal=penalty.proximal())
    shadow = train_shadows(model, start, ShadowTraining.of(record), data.normalised(), data.labels.long(),
                           torch.arange(12).unsqueeze(0), torch.Generator())
    for n, p in client.named_parameters():
        assert torch.allclose(shadow[n][0], p.detach(), atol=1e-5), n
    assert max(float((p.detach() - start[n]).abs().max()) for n, p in client.named_parameters()) > 1e-2


def test_the_elastic_term_changes_the_shadows():
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    x, y = torch.randn(10, 1, 28, 28), torch.randint(0, 10, (10,))
    rows = torch.arange(10).unsqueeze(0)
    plain = train_shadows(model, base, ShadowTraining(lr=0.2, epochs=2, batch_size=4), x, y, rows,
                          torch.Generator().manual_seed(1))
    pinned = train_shadows(model, base, ShadowTraining(lr=0.2, epochs=2, batch_size=4, lambda2=1.0), x, y, rows,
                           torch.Generator().manual_seed(1))
    assert max(float((plain[n] - pinned[n]).abs().max()) for n in plain) > 1e-2  # GENE-FL's default weight


def test_shadow_training_reads_genefl_s_record_and_refuses_what_it_cannot_repeat():
    record = LocalTraining(lr=0.1, steps=4, batch_size=32, num_samples=64, epochs=2, momentum=0.5,
                           penalty={"lambda1": 0.01, "lambda2": 1.0, "eps": 1e-6}, proximal=0.01)
    plan = ShadowTraining.of(record)
    assert (plan.lambda1, plan.lambda2, plan.eps, plan.momentum, plan.steps(64)) == (0.01, 1.0, 1e-6, 0.5, 4)
    with pytest.raises(AttackNotApplicableError, match="DP-SGD"):
        ShadowTraining.of(LocalTraining(lr=0.1, steps=1, batch_size=8, num_samples=8, clip=1.0))


def test_the_likelihood_ratio_by_hand():
    rng = np.random.default_rng(0)
    phi_shadows = torch.tensor(rng.normal(size=(8, 3)))
    inside = torch.zeros(8, 3, dtype=torch.bool)
    inside[::2] = True
    phi = torch.tensor([0.3, -1.0, 2.0], dtype=torch.double)
    got = likelihood_ratio(phi, phi_shadows, inside, fixed_variance=False)
    s, m = phi_shadows.numpy(), inside.numpy()
    for i in range(3):
        a, b = s[m[:, i], i], s[~m[:, i], i]
        want = (stats.norm.logpdf(phi[i].item(), a.mean(), a.std(ddof=1))
                - stats.norm.logpdf(phi[i].item(), b.mean(), b.std(ddof=1)))
        assert float(got[i]) == pytest.approx(want, rel=1e-9)
    # fixed variance: one pooled variance per side, sum of squares over all records by their degrees of freedom
    pooled_in = sum(((s[m[:, i], i] - s[m[:, i], i].mean()) ** 2).sum() for i in range(3)) / (3 * 3)
    pooled_out = sum(((s[~m[:, i], i] - s[~m[:, i], i].mean()) ** 2).sum() for i in range(3)) / (3 * 3)
    fixed = likelihood_ratio(phi, phi_shadows, inside, fixed_variance=True)
    i = 1
    want = (stats.norm.logpdf(-1.0, s[m[:, i], i].mean(), np.sqrt(pooled_in))
            - stats.norm.logpdf(-1.0, s[~m[:, i], i].mean(), np.sqrt(pooled_out)))
    assert float(fixed[i]) == pytest.approx(want, rel=1e-9)
    z = offline_score(phi, phi_shadows, fixed_variance=False)
    assert float(z[2]) == pytest.approx((2.0 - s[:, 2].mean()) / s[:, 2].std(ddof=1), rel=1e-9)


def test_the_logit_confidence_is_log_odds():
    logits = torch.tensor([[3.0, 1.0, -2.0], [0.0, 0.0, 0.0]], dtype=torch.double)
    p = torch.softmax(logits, -1)
    got = logit_confidence(logits, torch.tensor([1, 2]))
    assert torch.allclose(got, torch.log(torch.stack([p[0, 1] / (1 - p[0, 1]), p[1, 2] / (1 - p[1, 2])])))


def test_online_shadows_hold_each_candidate_half_the_time_and_fill_by_class():
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    population = torch.tensor([0] * 10 + [1] * 10)
    rows, inside = shadow_datasets(labels, population, 6, 6, online=True, generator=torch.Generator().manual_seed(0))
    assert rows.shape == (6, 6) and (inside.sum(0) == 3).all() and (inside.sum(1) == 4).all()
    assert not (inside[0::2] & inside[1::2]).any()  # complementary pairs
    for k in range(6):
        assert len(set(rows[k].tolist())) == 6  # no record twice in a shadow
        assert set(rows[k][rows[k] < 8].tolist()) == set(inside[k].nonzero().flatten().tolist())
        fill = rows[k][rows[k] >= 8] - 8
        assert sorted(population[fill].tolist()) == [0, 1]  # the candidates' classes, half and half
    rows, inside = shadow_datasets(labels, population, 6, 4, online=False, generator=torch.Generator().manual_seed(0))
    assert not inside.any() and (rows >= 8).all() and (population[rows - 8] == 0).sum(1).tolist() == [3] * 4
    with pytest.raises(AttackNotApplicableError, match="population records of class"):
        shadow_datasets(labels, population[:12], 12, 2, online=False, generator=torch.Generator())


@pytest.mark.parametrize("overrides, message", [
    (["attack=lira", "payload=cluster_model"], "averages several clients'"),
    (["attack=lira", "fl=fedavg", "payload=update", "defense=dpsgd"], "do not repeat DP-SGD's sampling and noise"),
    (["attack=lira", "fl=fedavg", "payload=update", "model=resnet18"], "batch norm"),
    (["attack=lira", "attack.variant=both"], "attack.variant='both': allowed online, offline"),
])
def test_lira_refuses_before_training(overrides, message):
    with pytest.raises(Exception, match=message):
        preflight(overrides)


@pytest.mark.slow
def test_lira_finds_the_members_of_an_overfit_update_better_than_the_loss_change(tmp_path):
    lira = privbench.run([*OVERFIT, "attack=lira", "attack.shadows=16"], results_dir=tmp_path)
    change = privbench.run([*OVERFIT, "attack=membership"], results_dir=tmp_path)
    got, base = lira.metrics["privacy"], change.metrics["privacy"]
    assert got["mia_test"] == "lira_online" and got["mia_members"] == base["mia_members"] == 80
    # measured on the 2-core machine, seed 0: LiRA AUC 0.857, TPR 0.263 at FPR 1 %; loss change 0.739, 0.05
    assert got["mia_auc"] > 0.8 and got["mia_auc"] > base["mia_auc"] + 0.05
    assert got["mia_tpr_at_fpr_1pct_lo"] > base["mia_tpr_at_fpr_1pct"]
    threat = json.loads((lira.run_dir / "threat_model.json").read_text())
    assert threat["attack_budget"]["shadows"] == 16 and threat["attack_budget"]["variant"] == "online"
    assert "none of them a candidate" in threat["population"] and threat["training"]["epochs"] == 30
