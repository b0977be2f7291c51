"""SME (Zhu et al., ICML 2023): its objective by hand at both ends of the segment, alpha learned only inside it, the
attack on a client's multi-step update trained by privbench's own SGD, and its refusals."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from privbench.attacks.labels.views import LabelView
from privbench.attacks.reconstruction.sme import SME
from privbench.attacks.target import AttackTarget, Part, Unroll
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.errors import AttackNotApplicableError
from privbench.fl.sgd import local_train
from privbench.metrics.reconstruction import score
from privbench.models import MLP
from privbench.pixels import bounds, denormalise, normalise


def _by_hand(model: torch.nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
             observed: dict[str, torch.Tensor], tv: float, clip: float | None = None) -> float:
    """``1 - <g, u> / (|g| |u|)`` of the mean cross-entropy's gradient at ``params`` and the observed direction, plus
    ``tv`` times the mean of the two directions' mean absolute neighbour differences (the reference code's TV), with
    plain torch operations."""
    local = copy.deepcopy(model)
    with torch.no_grad():
        for n, p in local.named_parameters():
            p.copy_(params[n])
    rows = []
    for i in range(len(x)):  # each candidate's gradient over every parameter, clipped to ``clip`` in L2 norm
        local.zero_grad()
        F.cross_entropy(local(x[i:i + 1]), y[i:i + 1]).backward()
        every = torch.cat([p.grad.flatten() for p in local.parameters()])
        factor = 1.0 if clip is None else min(1.0, clip / (float(every.norm()) + 1e-6))
        rows.append(factor * torch.cat([dict(local.named_parameters())[n].grad.flatten() for n in observed]))
    g = torch.stack(rows).mean(0)
    u = torch.cat([observed[n].flatten() for n in observed])
    cos = float(g @ u) / (float(g.norm()) * float(u.norm()))
    variation = float((x[..., :, 1:] - x[..., :, :-1]).abs().mean() + (x[..., 1:, :] - x[..., :-1, :]).abs().mean()) / 2
    return 1 - cos + tv * variation


@pytest.mark.parametrize(("alpha", "clip"), [(0.0, None), (1.0, None), (0.3, None), (0.3, 0.05)])
def test_the_objective_is_the_cosine_of_one_gradient_at_the_surrogate_on_the_segment(alpha, clip):
    torch.manual_seed(0)
    model = MLP(in_channels=1, image_size=28, num_classes=10)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    observed = {n: torch.randn_like(p) for n, p in start.items() if n != "body.0.bias"}  # one name not carried
    x, y, scale = torch.randn(3, 1, 28, 28), torch.tensor([1, 4, 4]), 0.04
    target = AttackTarget(model, observed, 3, (1, 28, 28), 10, clip=clip)
    got = float(SME(tv=0.5).objective(target, x, y, None, torch.tensor(alpha), start, list(observed), scale).detach())
    # the surrogate: theta_0 + alpha (theta_T - theta_0), theta_T = theta_0 - scale * pseudo-gradient; the rest theta_0
    surrogate = {n: start[n] - alpha * scale * observed[n] if n in observed else start[n] for n in start}
    assert got == pytest.approx(_by_hand(model, surrogate, x, y, observed, 0.5, clip), rel=1e-5, abs=1e-6)


def _update(n: int, epochs: int, batch: int, lr: float, seed: int = 0) -> tuple[LabelView, torch.Tensor,
                                                                                 torch.Tensor]:
    """A FedAvg client's 2NN update from privbench's own SGD (shuffled epochs), as the attacker sees it (the true
    counts handed over as the oracle control), and its images and labels."""
    train, test = load_fashion_mnist_subset(train=True), load_fashion_mnist_subset(train=False)
    data = train.subset(torch.from_numpy(np.random.default_rng(seed).choice(len(train.labels), n, replace=False)))
    torch.manual_seed(seed)
    model = MLP(in_channels=1, image_size=28, num_classes=10)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    client = copy.deepcopy(model)
    steps = local_train(client, data, epochs=epochs, lr=lr, batch_size=batch,
                        generator=torch.Generator().manual_seed(seed + 100))
    observed = {k: -(client.state_dict()[k] - start[k]) / (lr * steps) for k in start}
    target = AttackTarget(model, observed, n, (1, 28, 28), 10, bounds(train.mean, train.std),
                          Unroll(lr, steps, parts=(Part(0, n, steps, batch),)), knowledge={"payload": "plain"})
    public = normalise(test.images[:500].float() / 255.0, train.mean, train.std)
    view = LabelView(target, public, test.labels[:500])
    view.oracle_counts = torch.bincount(data.labels, minlength=10)
    return view, data.images.float() / 255.0, data.labels


def _psnrs(found, pixels: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    train = load_fashion_mnist_subset(train=True)
    recon = denormalise(found.images, train.mean, train.std).clamp(0, 1)
    return np.array([r["psnr"] for r in score(recon, pixels, recon_labels=found.labels, truth_labels=y,
                                              use_lpips=False)["matched"]])


def test_alpha_is_learned_inside_the_segment_and_stays_at_an_end():
    view, _, _ = _update(4, 2, 2, 0.004)
    inside = SME(iterations=30, labels="oracle").attack(view, seed=0)
    assert len(inside.info["alpha"]) == 1 and 0.0 <= inside.info["alpha"][0] <= 1.0
    assert inside.info["alpha"][0] != 0.5  # Adam moved it (about 1e-3 a step)
    assert inside.attempts[0]["alpha"] == inside.info["alpha"][0]
    view, _, _ = _update(4, 2, 2, 0.004)
    assert SME(iterations=30, alpha=0.0, labels="oracle").attack(view, seed=0).info["alpha"] == [0.0]


@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_it_rebuilds_a_small_clients_multi_step_update_with_its_recovered_counts():
    """FedAvg's 2NN, 8 images in 4 epochs of batches of 4 reshuffled every epoch (8 steps, lr 0.004), one attempt of
    300 steps: the counts are recovered exactly and SME rebuilds most images past 20 dB."""
    view, pixels, y = _update(8, 4, 4, 0.004)
    found = SME(iterations=300).attack(view, seed=0)
    assert found.info["label_counts"] == {int(c): int(k) for c, k in enumerate(np.bincount(y.numpy(), minlength=10))
                                          if k}
    psnrs = _psnrs(found, pixels, y)
    assert (psnrs >= 20.0).sum() >= 6, psnrs


def test_a_gradient_an_aggregate_or_an_update_without_training_is_refused_in_one_line(compose_cfg):
    from privbench.audit.plan import plan

    with pytest.raises(AttackNotApplicableError, match="cannot attack payload=gradient"):
        plan(compose_cfg("attack=sme", "fl=fedavg", "payload=gradient"))
    with pytest.raises(AttackNotApplicableError, match="reads one client's update; a cluster_model averages"):
        plan(compose_cfg("attack=sme", "fl=genefl", "payload=cluster_model"))
    model = MLP(in_channels=1, image_size=28, num_classes=10)
    bare = AttackTarget(model, {"fc.bias": torch.zeros(10)}, 2, (1, 28, 28), 10, knowledge={"payload": "p"})
    public, labels = torch.zeros(1, 1, 28, 28), torch.zeros(1, dtype=torch.long)
    with pytest.raises(AttackNotApplicableError, match="declares no local training"):
        SME().attack(LabelView(bare, public, labels), seed=0)
    two = Unroll(0.1, 2, parts=(Part(0, 1, 2, 1), Part(1, 2, 2, 1)))
    summed = AttackTarget(model, {"fc.bias": torch.zeros(10)}, 2, (1, 28, 28), 10, unroll=two,
                          knowledge={"payload": "cluster_model"})
    with pytest.raises(AttackNotApplicableError, match="reads one client's update; cluster_model averages 2"):
        SME().attack(LabelView(summed, public, labels), seed=0)
