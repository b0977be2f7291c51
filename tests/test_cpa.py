"""The Cocktail Party Attack: separation of a first linear layer's gradient, its certificate and peeling
(attacks/reconstruction/cpa.py, ica.py, peeling.py)."""
from __future__ import annotations

import pytest
import torch

from privbench.attacks.reconstruction import ica
from privbench.attacks.reconstruction.cpa import CocktailParty
from privbench.attacks.reconstruction.peeling import Mixture
from privbench.attacks.target import AttackTarget
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.errors import AttackNotApplicableError
from privbench.models import MLP, LeNet
from privbench.pixels import bounds, normalise

TRAIN = load_fashion_mnist_subset(train=True)


def batch(size: int, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    images = normalise(TRAIN.images[offset:offset + size].float() / 255, TRAIN.mean, TRAIN.std)
    return images, TRAIN.labels[offset:offset + size]


def cohort(parts: list[tuple[torch.Tensor, torch.Tensor, float]], *, seed: int = 0,
           drop: str = "") -> tuple[AttackTarget, MLP]:
    """The weighted sum of each part's mean gradient on a fresh 2NN-like MLP (a cohort's one-step updates)."""
    torch.manual_seed(seed)
    net = MLP(in_channels=1, image_size=28, num_classes=10, hidden=(100, 100))
    total: list[torch.Tensor] = []
    for images, labels, weight in parts:
        loss = torch.nn.functional.cross_entropy(net(images), labels)
        grads = torch.autograd.grad(loss, list(net.parameters()))
        total = [weight * g for g in grads] if not total else [t + weight * g for t, g in zip(total, grads)]
    gradient = {n: g.detach() for (n, _), g in zip(net.named_parameters(), total) if n != drop}
    return AttackTarget(model=net, gradient=gradient, num_images=sum(len(p[0]) for p in parts),
                        image_shape=(1, 28, 28), num_classes=10, bounds=bounds(TRAIN.mean, TRAIN.std)), net


def matched(found: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Each true image's nearest rebuilt one's largest pixel error."""
    nearest = torch.cdist(truth.flatten(1), found.flatten(1)).argmin(1)
    return (found[nearest] - truth).flatten(1).abs().amax(1)


def test_edges_are_the_pixel_differences():
    row = torch.arange(6.0).reshape(1, 6)  # a 2 x 3 image [[0, 1, 2], [3, 4, 5]]
    assert ica.edges(row, (1, 2, 3)).tolist() == [[1, 1, 1, 1, 3, 3, 3]]


def test_an_isolating_row_gives_the_input_at_its_own_scale_and_sign():
    x = torch.tensor([[1.0, -2.0, 3.0], [0.5, 0.5, -1.0]], dtype=torch.float64)
    a = torch.tensor([[2.0, -1.0], [0.5, 3.0], [-4.0, 1.0]], dtype=torch.float64)  # [m, B]
    g, b = a @ x, a.sum(1)
    unmixing = torch.linalg.pinv(a)  # rows that isolate each input, at any scale
    rebuilt = ica.as_inputs(-7.0 * unmixing, g, b)
    assert torch.allclose(rebuilt, x)


def test_whitening_leaves_uncorrelated_unit_rows():
    g = torch.randn(30, 400, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    g = torch.randn(30, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) @ g[:5]
    _, z, gap = ica.whiten(g, 5)
    assert torch.allclose(z @ z.T / z.shape[1], torch.eye(5, dtype=torch.float64), atol=1e-9)
    assert gap < 1e-8  # rank 5 exactly
    with pytest.raises(ValueError, match="fewer than 6"):
        ica.whiten(g, 6)


def test_peeling_a_known_input_leaves_the_others_mixture_exactly():
    x, _ = batch(5)
    xs = x.flatten(1).double()
    a = torch.randn(40, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    low = torch.full((784,), float(bounds(TRAIN.mean, TRAIN.std)[0]), dtype=torch.float64)
    mixture = Mixture(a @ xs, a.sum(1), 5, low)
    rest = mixture.peel(xs[1:3], a[:, 1:3] * torch.tensor([0.3, -2.0], dtype=torch.float64))  # any scale or sign
    assert rest.rank == 3
    keep = [0, 3, 4]
    assert torch.allclose(rest.weight_grad, a[:, keep] @ xs[keep], atol=1e-9)
    assert torch.allclose(rest.bias_grad, a[:, keep].sum(1), atol=1e-9)


def test_a_batch_is_separated_certified_and_peeled_exactly():
    images, labels = batch(8)
    t, _ = cohort([(images, labels, 1.0)])
    found = CocktailParty(starts=200).attack(t, seed=0)
    assert found.info["certified"] == [True] * 8
    assert matched(found.images, images).max() < 1e-3
    order = torch.cdist(found.images.flatten(1), images.flatten(1)).argmin(1)
    assert found.labels.tolist() == labels[order].tolist()


def test_a_cohorts_weighted_sum_is_separated_into_every_members_images():
    (a, la), (b, lb) = batch(5, offset=20), batch(4, offset=60)
    t, _ = cohort([(a, la, 0.7), (b, lb, 0.3)], seed=1)
    found = CocktailParty(starts=200).attack(t, seed=0)
    assert sum(found.info["certified"]) == 9
    assert matched(found.images, torch.cat([a, b])).max() < 1e-3


def test_a_mixture_that_is_not_exact_certifies_nothing():
    images, labels = batch(8, offset=100)
    t, _ = cohort([(images, labels, 1.0)], seed=2)
    noise = torch.Generator().manual_seed(3)
    t.gradient = {n: g + 0.02 * g.abs().mean() * torch.randn(g.shape, generator=noise) for n, g in t.gradient.items()}
    found = CocktailParty(starts=200, patience=1).attack(t, seed=0)
    assert not any(found.info["certified"])  # noise 2 % of the gradient: no rebuilt image is exact
    assert len(found.info["rounds"]) == 2  # patience 1: one empty round tolerated, the second stops the search
    assert found.images.shape == images.shape  # the uncertified candidates are still scored


def test_without_peeling_the_candidates_are_returned_uncertified():
    images, labels = batch(8)
    t, _ = cohort([(images, labels, 1.0)])
    found = CocktailParty(starts=200, peel=False).attack(t, seed=0)
    assert found.info["certified"] == [False] * 8 and found.info["rounds"] == []
    paper = CocktailParty(unmixing="paper", steps=50, peel=False).attack(t, seed=0)
    assert paper.images.shape == images.shape and paper.info["certified"] == [False] * 8
    assert paper.info["rounds"] == []


def test_inputs_it_cannot_separate_are_refused_in_one_line():
    attack = CocktailParty(starts=10)
    with pytest.raises(AttackNotApplicableError, match="fully connected"):
        attack.check_model(LeNet(in_channels=1, image_size=28, num_classes=10), (1, 28, 28))
    images, labels = batch(4)
    t, _ = cohort([(images, labels, 1.0)], drop="body.1.bias")
    with pytest.raises(AttackNotApplicableError, match="the bias fixes each input's scale"):
        attack.attack(t, seed=0)
    t, _ = cohort([(images, labels, 1.0)])
    t.num_images = 101  # more images than the layer's 100 units
    with pytest.raises(AttackNotApplicableError, match="100 units"):
        attack.attack(t, seed=0)
    t.num_images, t.bounds = 4, None
    with pytest.raises(AttackNotApplicableError, match="pixel range"):
        attack.attack(t, seed=0)
    with pytest.raises(ValueError, match="unmixing"):
        CocktailParty(unmixing="jade")
    with pytest.raises(ValueError, match="shares"):
        CocktailParty(shares=(0.0, 0.5))
