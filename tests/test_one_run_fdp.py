"""The one-run audit through f-DP (Mahloujifar, Melis and Chaudhuri, ICML 2025): the test of a curve, its validity
on mechanisms whose tail is known exactly, and the paper's own anchors."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privbench.defenses.tradeoff import blow_up_inverse, releases_epsilon
from privbench.metrics.one_run import epsilon_lower_bound
from privbench.metrics.one_run_fdp import gdp_blow_up_inverse, gdp_delta, gdp_epsilon, gdp_lower_bound, rejects


def _randomised_response(eps: float):
    """(eps, 0)-DP randomised response on one bit: 1 - f(x) = min(e^eps x, 1 - e^-eps (1 - x)), inverted."""
    return lambda y: max(math.exp(-eps) * y, 1.0 - math.exp(eps) * (1.0 - y))


@pytest.mark.parametrize("eps, m", [(0.5, 40), (1.0, 40), (2.0, 25)])
def test_a_rejected_count_is_rare_under_randomised_response(eps: float, m: int) -> None:
    """Each canary's bit released by randomised response and guessed as released: the right guesses are exactly
    Binomial(m, e^eps / (1 + e^eps)). Wherever the test rejects the mechanism's own curve at tau, that tail is at
    most tau (Theorem 3.2), and the test does reject the counts far out in it."""
    p = math.exp(eps) / (1 + math.exp(eps))
    curve = _randomised_response(eps)
    rejected = [v for v in range(m + 1) if rejects(curve, m, m, v, tau=0.05)]
    assert rejected, "the test never rejects: vacuous"
    assert rejected == list(range(rejected[0], m + 1))  # more right guesses are only more surprising
    assert stats.binom.sf(rejected[0] - 1, m, p) <= 0.05
    # no abstention lost: the f-DP test rejects no later than the exact binomial tail test would at 1e-3
    assert rejected[0] <= int(stats.binom.isf(1e-3, m, p)) + 1


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_a_true_mu_gdp_mechanism_is_refuted_in_at_most_tau_of_runs() -> None:
    """Gaussian scores shifted by mu for included canaries (exactly mu-GDP per canary), guessed top and bottom:
    over 400 simulated runs the bound passes the true mu in at most 5 % (allowing for the simulation's error),
    and it comes within 0.6 of it on average (the method is not vacuous)."""
    rng = np.random.default_rng(0)
    mu, m, k, runs = 1.0, 2000, 100, 400
    over, found = 0, []
    for run in range(runs):
        members = rng.random(m) < 0.5
        scores = rng.normal(size=m) + mu * members
        order = np.argsort(-scores)
        right = int(members[order[:k]].sum() + (~members[order[-k:]]).sum())
        over += rejects(gdp_blow_up_inverse(mu), m, 2 * k, right)  # the bound passes mu exactly when mu is rejected
        if run < 20:
            found.append(gdp_lower_bound(m, 2 * k, right, delta=1e-5)[0])
    assert over <= 0.05 * runs + 2 * math.sqrt(0.05 * 0.95 * runs)
    assert np.mean(found) > 0.6 * mu


@pytest.mark.slow  # over 1.2 s: the quick suite's 4-minute goal
def test_the_papers_idealised_game_and_the_reference_vectors() -> None:
    """sigma = 1 (mu 1), 100,000 canaries, 1,500 guesses of which 1,429 right (the paper's idealised count): mu
    0.782, epsilon 3.30 at delta 1e-5, where Steinke et al.'s bound on the same guesses gives 2.67. PrivacyGuard's
    tutorial vector (100 canaries, 70 of 80 right, delta 1e-6) gives 3.29 on its 0.01 grid of sigma."""
    mu, eps = gdp_lower_bound(100_000, 1500, 1429, delta=1e-5)
    assert mu == pytest.approx(0.7818, abs=1e-3) and eps == pytest.approx(3.2997, abs=2e-3)
    assert epsilon_lower_bound(100_000, 1500, 1429, delta=1e-5) == pytest.approx(2.67, abs=0.01)
    assert eps < gdp_epsilon(1.0, delta=1e-5)  # below the mechanism's own 4.38
    mu, eps = gdp_lower_bound(100, 80, 70, delta=1e-6)
    assert 1 / 1.421 <= mu < 1 / 1.411 and eps == pytest.approx(3.29, abs=0.01)
    assert gdp_lower_bound(1000, 100, 50, delta=1e-5) == (0.0, 0.0)  # a coin's score refutes nothing


def test_gdp_epsilon_meets_its_delta_and_the_releases_family_is_gdp_at_rate_one() -> None:
    eps = gdp_epsilon(1.0, delta=1e-5)
    assert gdp_delta(1.0, eps) == pytest.approx(1e-5, rel=1e-6)
    assert eps == pytest.approx(4.3772, abs=1e-4)
    # two rate-1 releases at sigma 2 are exactly mu-GDP with mu = sqrt(2) / 2
    family, gdp = blow_up_inverse([(2.0, 1.0, 2)]), gdp_blow_up_inverse(math.sqrt(2) / 2)
    for y in (1e-3, 0.05, 0.5, 0.95):
        assert gdp(y) / 1.01 <= family(y) <= gdp(y) * (1 + 1e-4)  # rounded down to its grid, never up
    assert releases_epsilon([(2.0, 1.0, 2)], 1e-5) == pytest.approx(gdp_epsilon(math.sqrt(2) / 2, delta=1e-5), rel=1e-4)
    # subsampling makes the curve more private: at a TPR the least FPR is higher
    assert blow_up_inverse([(2.0, 0.25, 2)])(0.5) > family(0.5)


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="right <= guesses <= m"):
        rejects(lambda y: y, 10, 20, 5)


@pytest.mark.slow  # 6 s: a privacy loss distribution at every step of the bisection
def test_a_subsampled_round_is_tested_against_its_own_family() -> None:
    """At Poisson rate 1/4 the family is the round's subsampled releases at a scaled noise (its own shape, not
    mu-GDP's): all guesses right refute more than 150 of 200 do; the round's tight epsilon is its PLD's."""
    from privbench.audit.games.one_run_claim import fdp_bound

    knowledge = {"sigma": 1.0, "sample_rate": 0.25, "steps": 8, "delta": 1e-5}
    strong = fdp_bound(knowledge, 10_000, 200, 200, confidence=0.95)
    weak = fdp_bound(knowledge, 10_000, 200, 150, confidence=0.95)
    assert strong["fdp_family"] == "8 Gaussian releases at rate 0.25"
    assert strong["epsilon_claimed_tight"] == pytest.approx(releases_epsilon([(1.0, 0.25, 8)], 1e-5))
    assert 0 < weak["epsilon_lower_bound_fdp"] < strong["epsilon_lower_bound_fdp"]
    assert weak["epsilon_lower_bound_fdp"] < weak["epsilon_claimed_tight"]  # 150 of 200 refute less than the round
    # as the rate nears 1 the family nears mu-GDP (mu = sqrt(steps) / noise): the same guesses, the same bound
    near_one = fdp_bound({**knowledge, "sample_rate": 0.999999, "steps": 2}, 10_000, 200, 179, confidence=0.95)
    mu, eps = gdp_lower_bound(10_000, 200, 179, delta=1e-5)
    assert near_one["fdp_noise_multiplier"] == pytest.approx(math.sqrt(2) / mu, rel=0.01)
    assert near_one["epsilon_lower_bound_fdp"] == pytest.approx(eps, rel=0.01)


def test_a_curve_from_failed_arithmetic_claims_no_privacy(monkeypatch) -> None:
    """Where the PLD's trade-off comes back below what the first release alone allows (the arithmetic failed), the
    family's curve is taken as a perfect test, which no guesses refute: the bound never rises on a failure."""
    import riskcal.analysis

    monkeypatch.setattr(riskcal.analysis, "get_beta_from_pld", lambda pld, alpha: 1.0 - alpha)  # chance: too private
    inverse = blow_up_inverse([(0.5, 0.25, 4)])
    assert inverse(0.5) == 0.0 and not rejects(inverse, 10_000, 200, 200)
