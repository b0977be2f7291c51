"""The f-DP bound on membership inference: against hand-computed Gaussian DP, and from a DP-SGD run's accountant."""
from __future__ import annotations

import math

import pytest
from scipy.stats import norm

from privbench.defenses.dpsgd import DPSGD
from privbench.defenses.tradeoff import tpr_bound

FPRS = [0.01, 0.001]


def test_rate_one_releases_are_gaussian_dp_by_hand():
    """Three rate-1 releases at sigma 0.461 (a victim at epsilon 64): mu = sqrt(3)/0.461, TPR = Phi(Phi^-1(FPR) + mu)."""
    mu = math.sqrt(3) / 0.461
    by_hand = [norm.cdf(norm.ppf(a) + mu) for a in FPRS]
    assert tpr_bound([(0.461, 1.0, 3)], FPRS) == pytest.approx(by_hand, abs=1e-9)
    assert by_hand[1] == pytest.approx(0.748, abs=1e-3)


def test_the_privacy_loss_distribution_agrees_with_gaussian_dp_and_subsampling_lowers_the_bound():
    # a rate just below 1 goes through the privacy loss distribution; it must land on the GDP figure of rate 1
    near = tpr_bound([(1.0, 0.999999, 4)], FPRS)
    exact = [norm.cdf(norm.ppf(a) + 2.0) for a in FPRS]  # mu = sqrt(4) / 1
    assert near == pytest.approx(exact, abs=2e-3)
    sampled = tpr_bound([(1.0, 0.1, 4)], FPRS)
    assert all(a < s < e for a, s, e in zip(FPRS, sampled, exact))
    assert tpr_bound([], FPRS) == FPRS and tpr_bound([(0.0, 1.0, 1)], FPRS) == [1.0, 1.0]
    with pytest.raises(ValueError, match="FPRs must be in"):
        tpr_bound([(1.0, 1.0, 1)], [0.0])


def test_a_dp_client_bound_follows_its_accountant():
    import torch

    from privbench.models import LeNet

    dp = DPSGD(noise_multiplier=2.0, max_grad_norm=1.0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    x, y = torch.randn(2, 1, 28, 28), torch.tensor([0, 1])
    for _ in range(3):  # three audit gradients: rate 1, sigma 2
        dp.gradient(model, x, y, client="client0", lr=0.1, generator=torch.Generator().manual_seed(0))
    assert dp.tpr_bounds("client0", FPRS) == pytest.approx([norm.cdf(norm.ppf(a) + math.sqrt(3) / 2) for a in FPRS])
    assert dp.tpr_bounds("client9", FPRS) == FPRS  # released nothing: chance


@pytest.mark.parametrize("sigma", [0.001, 0.01, 0.1])
def test_small_noise_is_bounded_by_the_chance_of_being_sampled_and_never_by_chance(sigma):
    """At sigma -> 0 a Poisson-sampled release reveals a record exactly when it is sampled: 26 steps at rate 1/13
    give the test "was it ever sampled?" TPR 1 - (12/13)^26 + FPR (12/13)^26, which the bound must not undercut
    (before the grid was coarsened, sigma 0.001 took 14 GB); rate-1 releases beside them make it 1."""
    never = (12 / 13) ** 26
    bound = tpr_bound([(sigma, 1 / 13, 26)], [0.01, 0.001])
    for fpr, tpr in zip([0.01, 0.001], bound):
        assert 1 - never + fpr * never - 1e-9 <= tpr <= 1 - never + 0.02
    assert tpr_bound([(sigma, 1 / 13, 26), (sigma, 1.0, 3)], [0.01, 0.001]) == [1.0, 1.0]
