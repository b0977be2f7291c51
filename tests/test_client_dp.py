"""DP-FedAvg (client-level DP): its accountant against closed forms and Flower's noise rules, its mechanism against
hand-made sums, canary clients that pass an honest mechanism and catch four broken ones, and bad settings refused."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privbench.defenses.client_dp import DPFedAvg
from privbench.defenses.client_dp import accountant as acct
from privbench.defenses.client_dp.clipping import clip, split_noise
from privbench.errors import ConfigError
from privbench.fl.protocols.round import Upload
from privbench.payloads import Payload

SHAPES = {"w1": (40, 30), "b1": (40,), "w2": (10, 40)}
#: Three seeds, one run each; seeds 1 and 2 with the slow suite (the quick one keeps seed 0 of every case).
SEEDS = [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)]


def gaussian_delta(eps: float, mu: float) -> float:
    """The exact delta(eps) of a Gaussian mechanism of sensitivity/std mu (Balle and Wang 2018, Theorem 8)."""
    from scipy.stats import norm

    return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2))


def test_pld_epsilon_is_the_gaussian_composition_in_closed_form() -> None:
    # T rounds of noise z compose to one Gaussian of mu = sqrt(T) / z; PLD's epsilon is its exact delta's inverse
    for z, rounds in ((1.0, 1), (2.0, 9), (0.8, 4)):
        eps = acct.epsilon(acct.ClientSchedule(z, rounds), delta=1e-5, accountant="pld")
        assert gaussian_delta(eps, math.sqrt(rounds) / z) == pytest.approx(1e-5, rel=2e-2)
        assert acct.gdp_epsilon(math.sqrt(rounds) / z, delta=1e-5) == pytest.approx(eps, rel=1e-3)
        assert acct.epsilon(acct.ClientSchedule(z, rounds), delta=1e-5, accountant="rdp") >= eps  # RDP is looser


@pytest.mark.slow  # 4 s of accountant bisection; the quick suite sits at its 4-minute budget
def test_sampling_amplifies_and_calibration_meets_its_target() -> None:
    full = acct.epsilon(acct.ClientSchedule(1.0, 50), delta=1e-5)
    sampled = acct.epsilon(acct.ClientSchedule(1.0, 50, sample_rate=0.1), delta=1e-5)
    assert sampled < full / 3
    z = acct.noise_for(4.0, rounds=10, delta=1e-5)
    spent = acct.epsilon(acct.ClientSchedule(z, 10), delta=1e-5)
    assert 0.999 * 4.0 <= spent <= 4.0
    assert acct.gdp_epsilon(math.sqrt(10) / z, delta=1e-5) == pytest.approx(4.0, rel=2e-3)


def test_budget_stop_counts_the_rounds_a_budget_allows() -> None:
    per = [acct.epsilon(acct.ClientSchedule(1.5, k), delta=1e-5, accountant="rdp") for k in range(1, 8)]
    budget = (per[3] + per[4]) / 2  # between 4 and 5 rounds
    assert acct.rounds_within(budget, noise_multiplier=1.5, rounds=10, delta=1e-5, accountant="rdp") == 4
    mech = DPFedAvg(noise_multiplier=1.5, budget=budget, accountant="rdp")
    mech.plan(rounds=10, participants=5, victim_round=0, uploads=["update"])
    assert mech.rounds_allowed(10) == 4


def test_noise_rules_equal_flowers_own() -> None:
    from flwr.supercore.differential_privacy import compute_adaptive_noise_params, compute_stdv

    # central: noise on the average of m clipped updates (Flower) = z C on the sum / m (here)
    mech = DPFedAvg(noise_multiplier=1.3, clip=0.7)
    mech.plan(rounds=3, participants=5, victim_round=0, uploads=["update"])
    assert mech.update_z * 0.7 / 5 == pytest.approx(compute_stdv(1.3, 0.7, 5), abs=1e-12)
    # adaptive: the update's noise after the clipped count takes its share, default count noise m / 20
    ada = DPFedAvg(noise_multiplier=0.2, adaptive=True)
    ada.plan(rounds=3, participants=20, victim_round=0, uploads=["update"])
    stddev, update_z = compute_adaptive_noise_params(0.2, 20, None)
    assert (ada.count_stddev, ada.update_z) == pytest.approx((stddev, update_z), abs=1e-12)


@pytest.mark.parametrize("rate", [1.0, 0.25])
def test_rdp_epsilon_equals_flowers_own_accountant(rate: float) -> None:
    """Flower 1.42's RdpAccountant (fixed clipping; no amplification, or Poisson at sample_size / population_size,
    add/remove one client) gives privbench's RDP figure to 1e-6 over the same rounds."""
    from flwr.supercore.privacy_accounting import (
        GaussianPrivacyEvent,
        NeighboringRelation,
        PrivacyConfig,
        SamplingMethod,
    )
    from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

    population, cohort, z, rounds = 20, 5 if rate < 1 else 20, 0.9, 12
    flower = RdpAccountant(PrivacyConfig(
        target_delta=1e-5, population_size=population, neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
        sampling_method=SamplingMethod.POISSON if rate < 1 else SamplingMethod.NO_AMPLIFICATION))
    flower.compose(GaussianPrivacyEvent(noise_multiplier=z, sample_size=cohort, population_size=population), rounds)
    ours = acct.epsilon(acct.ClientSchedule(z, rounds, rate), delta=1e-5, accountant="rdp")
    assert ours == pytest.approx(flower.get_privacy_spent().epsilon, abs=1e-6)
    # PLD is tighter than RDP on the same releases (privbench's default)
    assert acct.epsilon(acct.ClientSchedule(z, rounds, rate), delta=1e-5) < ours


def test_a_clientapp_sends_on_the_wire_of_its_aggregation() -> None:
    """On Flower, a local-DP client clips and noises in its own ClientApp; sealing stays Flower's SecAgg+ mod's."""
    from privbench.defenses.client_dp.wire import LocalDPWire
    from privbench.defenses.secure_aggregation import SecAggPlus
    from privbench.fl.trainer import SGDTrainer
    from privbench.fl.wire import Outbox

    outbox = Outbox(sends=["update"], trainer=SGDTrainer())
    assert isinstance(DPFedAvg(mode="local").node_wire(outbox), LocalDPWire)
    assert DPFedAvg(mode="central").node_wire(outbox) is outbox
    assert SecAggPlus().node_wire(outbox) is outbox


def test_clipping_scales_to_the_bound_and_leaves_small_updates() -> None:
    big = {"a": torch.tensor([6.0, 8.0])}
    out, n = clip(big, 2.0)
    assert n == 10.0 and out["a"].tolist() == pytest.approx([1.2, 1.6])
    small, _ = clip({"a": torch.tensor([0.3, 0.4])}, 2.0)
    assert small["a"].tolist() == pytest.approx([0.3, 0.4])
    assert split_noise(1.0, 5.0) == pytest.approx((1 - 1 / 100) ** -0.5)


def _uploads(base: dict[str, torch.Tensor], round_: int, gen: torch.Generator, scale: float = 3.0) -> list[Upload]:
    out = []
    for c in range(5):
        tensors = {n: t + scale * torch.randn(t.shape, generator=gen) / 30 for n, t in base.items()}
        out.append(Upload(10, Payload.from_tensors(kind="update", round=round_, sender=f"client{c}",
                                                   receiver="server", tensors=tensors), []))
    return out


def test_central_aggregate_is_the_uniform_mean_of_clipped_updates_plus_its_noise() -> None:
    base = {n: torch.zeros(s) for n, s in SHAPES.items()}
    ups = _uploads(base, 0, torch.Generator().manual_seed(0))
    quiet = DPFedAvg(noise_multiplier=0.0, clip=0.5)
    quiet.plan(rounds=1, participants=5, victim_round=0, uploads=["update"])
    got = quiet.combine(base, ups, round_=0, group=None, wire=None, seed=0)  # type: ignore[arg-type]
    by_hand = {n: sum(clip(u.tensors, 0.5)[0][n] for u in ups) / 5 for n in SHAPES}
    for n in SHAPES:
        assert torch.allclose(got[n], by_hand[n], atol=1e-6)
    noisy = DPFedAvg(noise_multiplier=2.0, clip=0.5)
    noisy.plan(rounds=1, participants=5, victim_round=0, uploads=["update"])
    out = noisy.combine(base, ups, round_=0, group=None, wire=None, seed=0)  # type: ignore[arg-type]
    residual = torch.cat([((out[n] - by_hand[n]) * 5).flatten() for n in SHAPES])
    assert residual.std().item() == pytest.approx(2.0 * 0.5, rel=0.05)  # z C on the sum


class NoiseReusedAcrossRounds(DPFedAvg):
    def noise_generator(self, round_: int, who: str) -> torch.Generator:
        return super().noise_generator(0, who)


class NoiseReusedAcrossClients(DPFedAvg):
    def noise_generator(self, round_: int, who: str) -> torch.Generator:
        return super().noise_generator(round_, "everyone")


class ClippingSkippedOnOneLayer(DPFedAvg):
    skip_clipping = ("w1",)


class SamplingRateMisreported(DPFedAvg):
    """The cohort is drawn at rate 0.25; the accountant is told 0.01 (a population 25 times the real one)."""

    reported_rate = 0.01


class LocalNoiseAtAnotherSensitivity(DPFedAvg):
    """Flower's LocalDpMod given clip 1 and sensitivity 1e-4: the noise is 1e-4 of what the accountant assumes."""

    noise_sensitivity = 1e-4


def _audit(mech: DPFedAvg, *, rounds: int = 4, rate: float = 1.0) -> dict:
    base = {n: torch.zeros(s) for n, s in SHAPES.items()}
    mech.plan(rounds=rounds, participants=5, victim_round=0, uploads=["update"], sample_rate=rate)
    gen = torch.Generator().manual_seed(mech.seed)
    for r in range(rounds):
        ups = _uploads(base, r, gen)
        if mech.mode == "local":
            ups = [Upload(u.num_samples, u.payload.with_tensors(
                {n: base[n] + t for n, t in mech.local_release({n: u.tensors[n] - base[n] for n in base}, round_=r,
                                                                who=u.payload.sender).items()}), [])
                   for u in ups]
        base = mech.combine(base, ups, round_=r, group=None, wire=None, seed=mech.seed)  # type: ignore[arg-type]
    return mech.describe()["canary_estimate"]


@pytest.mark.slow  # over 1.2 s: the quick suite's 4-minute goal
@pytest.mark.parametrize("seed", SEEDS)
def test_canary_clients_pass_an_honest_mechanism(seed: int) -> None:
    for mode in ("central", "local"):
        est = _audit(DPFedAvg(mode=mode, noise_multiplier=1.0, canary_clients=200, seed=seed))
        low, high = est["epsilon_interval"]
        assert low <= est["claimed"], est["verdict"]
        assert est["verdict"].startswith("consistent with the claim")
        assert est["canary_shift"] == pytest.approx(1.0, abs=0.25)  # a canary of 2 clips moves the sum by one


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("broken, mode, defect", [
    (dict(cls=LocalNoiseAtAnotherSensitivity), "local", "another sensitivity"),  # a LocalDpMod misconfiguration
    (dict(cls=NoiseReusedAcrossRounds), "central", "reused across rounds"),
    (dict(cls=NoiseReusedAcrossClients), "local", "BROKEN"),
    (dict(cls=ClippingSkippedOnOneLayer), "central", "clipping skipped"),
])
def test_canary_clients_catch_a_broken_mechanism_in_one_run(broken: dict, mode: str, defect: str, seed: int) -> None:
    settings = dict(broken)
    cls = settings.pop("cls")
    est = _audit(cls(mode=mode, noise_multiplier=1.0, canary_clients=200, seed=seed, **settings))
    assert est["epsilon_alarm"] > est["claimed"], est["verdict"]
    assert est["verdict"].startswith("BROKEN") and defect in est["verdict"], est["verdict"]


@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_bad_settings_are_refused_before_training() -> None:
    cases = [dict(mode="global"), dict(clip=0.0), dict(noise_multiplier=-1.0), dict(noise_multiplier=float("nan")),
             dict(noise_multiplier=None), dict(delta=1.5), dict(accountant="gdp"), dict(target_epsilon=0.0),
             dict(mode="local", adaptive=True), dict(canary_clients=1),
             dict(canary_clients=10, canary_scale=0.5)]
    for case in cases:
        with pytest.raises(ConfigError, match=r"aggregation\."):
            DPFedAvg(**case)
    mech = DPFedAvg(noise_multiplier=1.0)
    with pytest.raises(ConfigError, match="aggregates no model update"):
        mech.plan(rounds=3, participants=5, victim_round=0, uploads=[])
    with pytest.raises(ConfigError, match="not one round fits"):
        DPFedAvg(noise_multiplier=1.0, budget=0.5).plan(rounds=3, participants=5, victim_round=0, uploads=["update"])
    with pytest.raises(ConfigError, match="before victim.round=5"):
        DPFedAvg(noise_multiplier=1.0, budget=8.0).plan(rounds=9, participants=5, victim_round=5, uploads=["update"])
    with pytest.raises(ConfigError, match="clipped_count_stddev"):
        DPFedAvg(noise_multiplier=1.0, adaptive=True).plan(rounds=3, participants=5, victim_round=0,
                                                           uploads=["update"])


FAST = ["fl=fedavg", "fl.rounds=2", "fl.local_epochs=1", "attack=none", "metrics.lpips=false",
        "aggregation=dpfedavg"]


@pytest.mark.slow
def test_local_dp_noise_is_on_the_wire_and_the_run_reports_its_accountant(tmp_path) -> None:
    from privbench import api
    from privbench.payloads import PayloadStore

    result = api.run([*FAST, "aggregation.mode=local", "aggregation.noise_multiplier=0.5", "aggregation.clip=0.1"],
                     results_dir=str(tmp_path))
    agg = result.metrics["defense"]["aggregation"]
    assert agg["client_epsilon"] == pytest.approx(acct.epsilon(acct.ClientSchedule(0.5, 2), delta=1e-5))
    assert agg["client_epsilon_other"] == pytest.approx(
        acct.epsilon(acct.ClientSchedule(0.5, 2), delta=1e-5, accountant="rdp"))
    assert agg["summary"][0].startswith("client-level epsilon")
    store = PayloadStore.open(result.run_dir / "payloads")
    update = store.load("r0000-update-client0-server")
    received = store.load("r0000-global_model-server-client0")
    change = torch.cat([(update.tensors[n] - received.tensors[n]).flatten() for n in update.tensors
                        if update.tensors[n].is_floating_point()])
    # a clipped change (norm <= 0.1) plus N(0, (0.5 * 0.1)^2) a coordinate: the noise is what the server sees
    assert change.std().item() == pytest.approx(0.05, rel=0.02)
    assert "local DP-FedAvg" in (update.protection or "")


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_budget_stop_ends_training_and_says_so(tmp_path) -> None:
    from privbench import api

    per = [acct.epsilon(acct.ClientSchedule(2.0, k), delta=1e-5) for k in (1, 2)]
    result = api.run([*FAST, "fl.rounds=3", "aggregation.noise_multiplier=2.0", f"aggregation.budget={per[1] + 0.01}"],
                     results_dir=str(tmp_path))
    agg = result.metrics["defense"]["aggregation"]
    assert agg["rounds_run"] == 2 and len(result.metrics["utility"]["history"]) == 2
    assert "stopped after 2 of 3 rounds" in agg["budget_stop"]
    assert agg["client_epsilon"] == pytest.approx(per[1])


@pytest.mark.parametrize("overrides, message", [
    (["fl=local"], "aggregates no model update"),
    (["aggregation.target_epsilon=0.0001"], "above 1e4"),
    (["aggregation=dpfedavg_secagg", "fl=genefl", "engine=flower"], "sums one layout"),
])
def test_impossible_runs_are_refused_in_one_line(compose_cfg, overrides, message) -> None:
    from privbench.audit.plan import plan, prepare

    fast = [o for o in FAST if not any(o.split("=")[0] == x.split("=")[0] for x in overrides)]
    with pytest.raises(ConfigError, match=message):
        prepare(plan(compose_cfg(*fast, *overrides)))


class TextbookClaim(DPFedAvg):
    """Claims epsilon 10 for noise set by the textbook formula z = sqrt(2 ln(1.25 / delta)) / 10, whose true
    epsilon (PLD) is 10.39: a mild overclaim."""

    def claimed(self, rounds: int, accountant: str | None = None, *, forced: bool = False) -> float:
        return 10.0


@pytest.mark.parametrize("seed", SEEDS)
def test_a_mild_overclaim_is_not_detectable_in_one_run(seed: int) -> None:
    z = math.sqrt(2 * math.log(1.25 / 1e-5)) / 10
    assert acct.epsilon(acct.ClientSchedule(z, 1), delta=1e-5) == pytest.approx(10.39, abs=0.01)
    est = _audit(TextbookClaim(noise_multiplier=z, canary_clients=200, seed=seed), rounds=1)
    assert not est["verdict"].startswith("BROKEN")  # the interval is far wider than the 4 % overclaim
    low, high = est["epsilon_interval"]
    assert high - low > 5 * 0.39  # five times the gap between the claim and the truth


def test_quantile_clipping_converges_where_flowers_moves_away() -> None:
    """Updates of norm about 3, bound 1.0, target 0.5, 20 clients, no count noise: the paper's rule (ours) grows the
    bound toward the median; Flower 1.42's adaptive clipping, whose indicator means "was clipped", shrinks it."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from flwr.server.strategy import DifferentialPrivacyClientSideAdaptiveClipping, FedAvg
    from flwr.supercore.differential_privacy import KEY_NORM_BIT, compute_adaptive_clip_model_update

    from privbench.defenses.client_dp.clipping import QuantileClip, update_norm

    flower = DifferentialPrivacyClientSideAdaptiveClipping(
        FedAvg(), noise_multiplier=0.0, num_sampled_clients=20, initial_clipping_norm=1.0,
        target_clipped_quantile=0.5, clip_norm_lr=0.2, clipped_count_stddev=0.0)
    ours = QuantileClip(1.0, target=0.5, lr=0.2, count_stddev=0.0)
    rng = np.random.default_rng(0)
    for _ in range(30):
        updates = [rng.normal(size=100) * 0.3 for _ in range(20)]
        replies = []
        for u in updates:
            sent = [u.copy()]
            bit = compute_adaptive_clip_model_update(sent, [np.zeros(100)], flower.clipping_norm)
            replies.append((None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(sent), 1, {KEY_NORM_BIT: bit})))
        flower._update_clip_norm(replies)
        ours.step([update_norm({"u": torch.from_numpy(u)}) <= ours.bound for u in updates], noise=0.0, denominator=20)
    assert flower.clipping_norm < 0.06
    assert 2.5 < ours.bound < 3.5  # the median norm is 0.3 sqrt(100) = 3


@pytest.mark.slow
def test_client_level_dp_composes_with_clusters_and_record_level_dp(tmp_path) -> None:
    """cluster-FedAvg's cluster cohorts under adaptive central DP-FedAvg, its clients under DP-SGD: both epsilons are
    reported, the canaries join one cohort a round, the bound steps once a round."""
    from privbench import api

    result = api.run(["fl=cluster_fedavg", "aggregation=dpfedavg", "defense=dpsgd", "attack=none", "fl.rounds=3",
                      "aggregation.adaptive=true", "aggregation.noise_multiplier=0.3", "aggregation.canary_clients=20",
                      "metrics.lpips=false"], results_dir=str(tmp_path))
    defense = result.metrics["defense"]
    agg = defense["aggregation"]
    assert defense["client_epsilon"] == pytest.approx(acct.epsilon(acct.ClientSchedule(0.3, 3), delta=1e-5))
    assert defense["epsilon_accounted"] > 0  # the record-level figure beside it
    assert agg["canary_estimate"]["rounds"] == 3
    assert len(set(agg["clip_history"])) <= 3 and agg["clip_history"][0] == 1.0
    from privbench.audit.summary import summary

    assert "client-level epsilon" in summary(result.metrics)


def test_poisson_sampling_draws_each_client_at_its_rate_and_the_victim_in_its_round() -> None:
    from privbench.fl.protocols.fedavg import FedAvg
    from privbench.victim import Victim

    proto = FedAvg(rounds=400, participants=5, local_epochs=1, lr=0.1, batch_size=32, sampling="poisson")
    victim = Victim(client=3, round=7)
    sizes = [len(proto.sample(r, 20, seed=0, victim=victim)) for r in range(400)]
    assert np.mean(sizes) == pytest.approx(5.0, abs=0.35)  # 400 rounds of Binomial(20, 0.25): sd of the mean 0.1
    assert min(sizes) < 5 < max(sizes)
    assert 3 in proto.sample(7, 20, seed=0, victim=victim)
    fixed = FedAvg(rounds=4, participants=5, local_epochs=1, lr=0.1, batch_size=32)
    assert {len(fixed.sample(r, 20, seed=0, victim=victim)) for r in range(4)} == {5}
    assert proto.sample_rate(20) == 0.25 and fixed.sample_rate(20) == 1.0


@pytest.mark.slow  # 4 s of accountant bisection; the quick suite sits at its 4-minute budget
def test_poisson_rounds_are_amplified_centrally_and_not_for_local_dp() -> None:
    central = DPFedAvg(noise_multiplier=1.0)
    central.plan(rounds=10, participants=5, victim_round=0, uploads=["update"], sample_rate=0.25)
    assert central.claimed(10) == pytest.approx(acct.epsilon(acct.ClientSchedule(1.0, 10, 0.25), delta=1e-5))
    assert central.claimed(10) < 0.6 * acct.epsilon(acct.ClientSchedule(1.0, 10), delta=1e-5)
    local = DPFedAvg(mode="local", noise_multiplier=1.0)  # the server sees who sends: sampling hides no one
    local.plan(rounds=10, participants=5, victim_round=0, uploads=["update"], sample_rate=0.25)
    assert local.claimed(10) == pytest.approx(acct.epsilon(acct.ClientSchedule(1.0, 10), delta=1e-5))
    # the noisy sum of a Poisson round is divided by the expected cohort, a public constant, even when empty
    base = {n: torch.zeros(s) for n, s in SHAPES.items()}
    quiet = DPFedAvg(noise_multiplier=0.0, clip=0.5)
    quiet.plan(rounds=1, participants=4, victim_round=0, uploads=["update"], sample_rate=0.2)
    ups = _uploads(base, 0, torch.Generator().manual_seed(0))
    got = quiet.combine(base, ups, round_=0, group=None, wire=None, seed=0)  # type: ignore[arg-type]
    assert torch.allclose(got["w1"], sum(clip(u.tensors, 0.5)[0]["w1"] for u in ups) / 4, atol=1e-6)
    empty = quiet.combine(base, [], round_=1, group=None, wire=None, seed=0)  # type: ignore[arg-type]
    assert torch.equal(empty["w1"], base["w1"])


@pytest.mark.parametrize("overrides, message", [
    (["fl=genefl", "fl.sampling=poisson", "payload=learngene"], "needs fixed-size cohorts"),
    (["fl.sampling=poisson", "aggregation=secagg", "payload=aggregate"], "known cohort size"),
    (["fl.sampling=sometimes"], "one of fixed, poisson"),
])
def test_poisson_sampling_is_refused_where_cohorts_must_have_a_size(compose_cfg, overrides, message) -> None:
    from privbench.audit.plan import plan, prepare

    with pytest.raises(ConfigError, match=message):
        prepare(plan(compose_cfg("fl=fedavg", "attack=none", "metrics.lpips=false", *overrides)))


@pytest.mark.slow
def test_a_poisson_run_reports_its_amplified_epsilon(tmp_path) -> None:
    from privbench import api

    result = api.run([*FAST, "fl.rounds=3", "fl.sampling=poisson", "aggregation.noise_multiplier=1.0"],
                     results_dir=str(tmp_path))
    agg = result.metrics["defense"]["aggregation"]
    assert agg["client_sampling"] == "Poisson at rate 0.5, amplified"
    # the victim joined round 0 whatever the draw: that round is not amplified for it; everyone else's 3 are
    victim = acct.epsilon(acct.ClientSchedule(1.0, 2, 0.5, unamplified=1), delta=1e-5)
    others = acct.epsilon(acct.ClientSchedule(1.0, 3, 0.5), delta=1e-5)
    assert agg["client_epsilon"] == pytest.approx(victim) and victim > others
    per_client = agg["client_epsilon_per_client"]
    assert per_client.pop("client0") == pytest.approx(victim)
    assert list(per_client.values()) == pytest.approx([others] * len(per_client))


@pytest.mark.parametrize("seed", SEEDS)
def test_a_sampling_rate_misreported_to_the_accountant_is_caught(seed: int) -> None:
    """Canary clients drawn by the cohort's own sampler join at its true rate 0.25; the claim amplified by a
    reported 0.01 is refuted, and the canaries' shift names the defect."""
    est = _audit(SamplingRateMisreported(noise_multiplier=0.8, canary_clients=200, seed=seed), rounds=10, rate=0.25)
    honest = DPFedAvg(noise_multiplier=0.8)
    honest.plan(rounds=10, participants=5, victim_round=0, uploads=["update"], sample_rate=0.25)
    assert est["claimed"] < honest.claimed(10)  # the accountant's figure is the misreported rate's
    assert est["epsilon_alarm"] > est["claimed"], est["verdict"]
    assert est["verdict"].startswith("BROKEN") and "sampled more often" in est["verdict"], est["verdict"]


@pytest.mark.slow  # over 1.2 s: the quick suite's 4-minute goal
def test_canaries_that_join_at_the_clients_rate_stay_under_the_amplified_claim() -> None:
    """The test never learns which rounds a canary joined (the adversary of the amplified claim does not either)."""
    est = _audit(DPFedAvg(noise_multiplier=0.8, canary_clients=200, seed=0), rounds=10, rate=0.25)
    assert est["verdict"].startswith("consistent") and est["epsilon_interval"][1] < est["claimed"]


def test_dp_fedavg_over_secagg_releases_what_central_dp_fedavg_releases(tmp_path) -> None:
    """Clients clip, SecAgg+ sums (uniformly: each client weighs 1, not its sample count), the server adds the
    same noise central DP-FedAvg would: the model equals central DP-FedAvg's up to SecAgg+'s quantisation, while the
    store holds masked vectors and the cohort's aggregate, never an upload."""
    from privbench.defenses.client_dp import SecureDPFedAvg
    from privbench.defenses.secure_aggregation import SecAggPlus
    from privbench.fl.trainer import SGDTrainer
    from privbench.fl.wire import Wire
    from privbench.payloads import CapturePolicy, PayloadStore

    base = {n: torch.zeros(s) for n, s in SHAPES.items()}
    policy = CapturePolicy.build(kinds="all", rounds="all", clients="all", victim_round=0, victim_client=0)
    wire = Wire(PayloadStore(tmp_path), policy, sends=("update", *SecAggPlus.sends), trainer=SGDTrainer())
    ups = _uploads(base, 0, torch.Generator().manual_seed(0))
    ups = [Upload(10 * (i + 1), u.payload, []) for i, u in enumerate(ups)]  # sample counts that must not weigh
    central, secure = DPFedAvg(noise_multiplier=2.0, clip=0.5), SecureDPFedAvg(noise_multiplier=2.0, clip=0.5)
    for mech in (central, secure):
        mech.plan(rounds=1, participants=5, victim_round=0, uploads=["update"])
    want = central.combine(base, ups, round_=0, group=None, wire=None, seed=0)  # type: ignore[arg-type]
    got = secure.combine(base, ups, round_=0, group=None, wire=wire, seed=0)
    for n in SHAPES:
        assert torch.allclose(got[n], want[n], atol=1e-5), n  # 2^22 levels over [-8, 8]: 4e-6 a client
    kinds = {r["kind"] for r in wire.store.records()}
    assert "aggregate" in kinds and "masked_upload" in kinds and "update" not in kinds
    aggregate = next(r for r in wire.store.records() if r["kind"] == "aggregate")
    clipped = {n: sum(clip({m: u.tensors[m] - base[m] for m in SHAPES}, 0.5)[0][n] for u in ups) / 5 for n in SHAPES}
    seen = wire.store.load(aggregate["id"]).tensors
    for n in SHAPES:  # the server's view: the clean mean of the clipped updates, before its noise
        assert torch.allclose(seen[n], clipped[n], atol=1e-5)
    assert secure.describe()["server_sees"].startswith("each cohort's mean of clipped updates through SecAgg+")


@pytest.mark.parametrize("setting, message", [
    (dict(mode="local"), "noises the secure sum"),
    (dict(adaptive=True), "never sees which updates were clipped"),
])
def test_dp_fedavg_over_secagg_refuses_what_it_cannot_hide(setting: dict, message: str) -> None:
    from privbench.defenses.client_dp import SecureDPFedAvg

    with pytest.raises(ConfigError, match=message):
        SecureDPFedAvg(**setting)
    with pytest.raises(ConfigError, match="known cohort size"):
        SecureDPFedAvg().plan(rounds=2, participants=5, victim_round=0, uploads=["update"], sample_rate=0.25)


@pytest.mark.slow  # 5 s; test_dp_fedavg_over_secagg_releases_what_central_dp_fedavg_releases checks the mechanism quickly
def test_a_run_of_dp_fedavg_over_secagg_is_measured_by_its_canary_clients(tmp_path) -> None:
    from privbench import api
    from privbench.payloads import PayloadStore

    result = api.run(["fl=fedavg", "fl.rounds=3", "fl.local_epochs=1", "attack=none", "metrics.lpips=false",
                      "aggregation=dpfedavg_secagg", "aggregation.noise_multiplier=1.0", "aggregation.clip=0.5",
                      "aggregation.canary_clients=200"], results_dir=str(tmp_path))
    agg = result.metrics["defense"]["aggregation"]
    assert agg["mode"] == "central, over SecAgg+" and agg["client_epsilon"] == pytest.approx(
        acct.epsilon(acct.ClientSchedule(1.0, 3), delta=1e-5))
    assert agg["canary_estimate"]["verdict"].startswith("consistent"), agg["canary_estimate"]["verdict"]
    comm = result.metrics["bytes"]
    assert comm["uplink_bytes"] > 0 and "masked_upload" in (result.run_dir / "comm.json").read_text()
    kinds = {r["kind"] for r in PayloadStore.open(result.run_dir / "payloads").records()}
    assert "aggregate" in kinds and not kinds & {"update", "gradient"}  # no upload reaches the server's store


@pytest.mark.parametrize("protocol", ["fedavg", "genefl"])
def test_client_dp_uploads_reads_client_dp_s_stores(protocol):
    """experiment=client_dp_uploads trains nothing again after client_dp: each arm composes to the same training key,
    while what is attacked differs (the upload, not the released model)."""
    from privbench import api
    from privbench.audit.resume import training_key

    released = api.compose(["experiment=client_dp", f"+experiment/client_dp/protocol={protocol}",
                            "+experiment/client_dp=local_eps4", "seed=1"])
    upload = api.compose(["experiment=client_dp_uploads", "+experiment/client_dp_uploads/read=source",
                          f"+experiment/client_dp_uploads/protocol={protocol}", "+experiment/client_dp=local_eps4",
                          "seed=1"])
    assert training_key(released) == training_key(upload)
    assert upload.payload.kind == ("update" if protocol == "fedavg" else "learngene")
    assert released.payload.kind != upload.payload.kind
