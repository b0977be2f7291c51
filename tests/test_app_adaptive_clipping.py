"""Flower's adaptive-clipping DP wrappers in an audited app (``app_audit/adaptive_clipping.py``): the privacy their
rounds spent from the clip noted each round, against hand-composed Gaussian releases; canary clients that follow
the clip; and Flower's own wrapper stepped by hand, so that the order the module assumes is the order Flower runs."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from privbench.app_audit.adaptive_clipping import ClipTrajectory, adaptive_wrapper, as_run, stated_noise
from privbench.app_audit.canaries import measure, scores
from privbench.app_audit.canary_client import CLIPS, CanaryPlan, canary_change
from privbench.app_audit.recording import Broadcast, Sent
from privbench.app_audit.simulation import AppRun
from privbench.metrics.one_run_fdp import gdp_epsilon


def test_a_constant_clip_without_a_count_spends_what_its_setting_states():
    clips = ClipTrajectory({1: 0.5, 2: 0.5, 3: 0.5}, final=0.5)
    out = as_run(clips, z_delta=0.8, sigma_b=0.0, declared=4, received={1: 4, 2: 4, 3: 4}, delta=1e-5)
    assert out["mu_as_run"] == pytest.approx(math.sqrt(3) / 0.8) == pytest.approx(out["mu_stated"])
    assert out["epsilon_as_run"] == pytest.approx(gdp_epsilon(math.sqrt(3) / 0.8, delta=1e-5))
    assert out["problems"] == [] and out["clip_ratio_range"] == [1.0, 1.0]


def test_the_rounds_compose_with_the_count_and_the_clip_after_each_update_by_hand():
    # round t: the mean (sensitivity C_t m / n) noised at z_Delta C_{t+1}, and the count (sensitivity 1) at sigma_b
    clips = ClipTrajectory({1: 1.0, 2: 0.8, 3: 0.9}, final=0.6)
    z_delta, sigma_b = stated_noise(1.0, 0.0), 2.0
    out = as_run(clips, z_delta=z_delta, sigma_b=sigma_b, declared=4, received={1: 4, 2: 2, 3: 4}, delta=1e-5)
    by_hand = (1.0 / 0.8) ** 2 + (0.8 * 4 / 2 / 0.9) ** 2 + (0.9 / 0.6) ** 2 + 3 / sigma_b ** 2
    assert out["mu_as_run"] == pytest.approx(math.sqrt(by_hand), rel=1e-12)
    stated = stated_noise(z_delta, sigma_b)  # the wrapper's z: 1 / z^2 = 1 / z_Delta^2 + 1 / (2 sigma_b)^2
    assert 1 / stated ** 2 == pytest.approx(1.0 + 1 / 16)
    assert out["mu_stated"] == pytest.approx(math.sqrt(3) / stated)
    assert out["epsilon_as_run"] > out["epsilon_stated"] and len(out["problems"]) == 1
    assert "moves its clipped count by 1" in out["problems"][0] and "from 0.889 to 1.5" in out["problems"][0]
    assert out["mu_mean_as_run"] == pytest.approx(math.sqrt(by_hand - 3 / sigma_b ** 2), rel=1e-12)


def test_a_round_without_a_clip_after_its_update_or_not_noted_is_not_bounded():
    out = as_run(ClipTrajectory({1: 1.0}), z_delta=1.0, sigma_b=1.0, declared=2, received={1: 2}, delta=1e-5)
    assert out["epsilon_as_run"] == math.inf and "round 1 has no clip after its update" in out["problems"][0]
    noted = ClipTrajectory({1: 1.0, 2: 0.9}, final=0.8)  # the strategy trained 3 rounds; 2 were noted
    out = as_run(noted, z_delta=1.0, sigma_b=1.0, declared=2, received={1: 2, 2: 2, 3: 2}, delta=1e-5)
    assert out["epsilon_as_run"] == math.inf and "noted for rounds [1, 2] where the strategy trained rounds [1, 2, 3]" \
        in out["problems"][0]
    none = as_run(ClipTrajectory(), z_delta=1.0, sigma_b=1.0, declared=2, received={1: 2}, delta=1e-5)
    assert none["epsilon_as_run"] == math.inf  # nothing noted is not zero spent


def test_the_wrapper_s_row_states_its_given_noise_and_what_its_rounds_spent():
    from privbench.app_audit.privacy import strategy_dp

    class FedAvg:
        pass

    class DifferentialPrivacyServerSideAdaptiveClipping:
        noise_multiplier, clipped_count_stddev, num_sampled_clients = 2.0, 1.5, 4
        clipping_norm, strategy = 0.3, FedAvg()

    clips = ClipTrajectory({1: 1.0, 2: 0.8}, final=0.6)
    row = strategy_dp(DifferentialPrivacyServerSideAdaptiveClipping(), sent=[4, 4], delta=1e-5, clips=clips,
                      rounds_sent=[1, 2])
    assert row is not None and row["noise_multiplier"] == pytest.approx(stated_noise(2.0, 1.5))
    assert row["clip"] == 1.0 and row["epsilon_measured"] == row["epsilon_as_run"]
    assert row["mu_as_run"] == pytest.approx(math.sqrt((1 / 0.8 / 2) ** 2 + (0.8 / 0.6 / 2) ** 2 + 2 / 1.5 ** 2))
    unnoted = strategy_dp(DifferentialPrivacyServerSideAdaptiveClipping(), sent=[4], delta=1e-5)
    assert unnoted is not None and unnoted["epsilon_measured"] == math.inf and "not bounded" in unnoted["problems"][0]


@pytest.fixture
def task_identity(monkeypatch):
    from flwr.supercore.task_identity import TaskIdentity

    for attr in ("_run_id", "_task_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, attr, 1)


def test_flower_s_wrapper_noises_with_the_clip_after_its_update(task_identity):
    """Flower 1.42's server-side wrapper (Message API), stepped by hand on four clipped replies (its count's noise
    taken out): the noise it adds has the std of the clip after its update, and the clip falls while every update
    is clipped."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.app.message_type import MessageType
    from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping, FedAvg

    wrapper = DifferentialPrivacyServerSideAdaptiveClipping(FedAvg(), noise_multiplier=1.0, num_sampled_clients=4,
                                                             initial_clipping_norm=1.0, clipped_count_stddev=10.0)
    assert adaptive_wrapper([object(), wrapper]) is wrapper
    dims = 200_000
    wrapper.current_arrays = ArrayRecord({"w": Array(np.zeros(dims, np.float32))})
    replies = []
    for _ in range(4):  # each update of norm 10: clipped
        content = RecordDict({"arrays": ArrayRecord({"w": Array(np.full(dims, 10 / dims ** 0.5, np.float32))}),
                              "metrics": MetricRecord({"num-examples": 1}), "config": ConfigRecord({})})
        replies.append(Message(content, dst_node_id=1, message_type=MessageType.TRAIN))
    np.random.seed(0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("flwr.serverapp.strategy.dp_adaptive_clipping.validate_replies", lambda *a: True)
        mp.setattr(wrapper, "_noisy_fraction", lambda count, total: count / total)  # the count without its noise
        arrays, _ = wrapper.aggregate_train(1, replies)
    after = wrapper.clipping_norm
    assert after == pytest.approx(math.exp(-0.2 * (1 - 0.5)))  # every update clipped, yet the clip falls
    noise = arrays["w"].numpy() - 1.0 / dims ** 0.5  # the mean of four updates clipped to 1, less its value
    z_delta = wrapper.noise_multiplier
    assert noise.std() == pytest.approx(z_delta * after / 4, rel=0.01)  # the clip after the update, not 1.0


def _adaptive_run(clips: list[float], noise_multiplier: float, *, seed: int = 0) -> tuple[AppRun, CanaryPlan]:
    """Two canaries and two app clients through a central mechanism whose clip moves every round: updates clipped
    to that round's clip, the mean noised with ``noise_multiplier`` times it over 4."""
    shapes, rounds = {"w": torch.Size([600])}, len(clips)
    plan = CanaryPlan(count=2, partitions=4, norm=2 * clips[0], clip=clips[0], seed=seed, adaptive=True)
    gen = torch.Generator().manual_seed(seed)
    model, messages, models = torch.zeros(600), [], []
    for r, clip in enumerate(clips, start=1):
        models.append(Broadcast("train", r, {"w": model.clone()}, [], True))
        updates = [canary_change(plan, j, r, shapes, norm=2 * clip)["w"] for j in range(2)]
        updates += [3 * clip * torch.randn(600, generator=gen) / 600 ** 0.5 for _ in range(2)]
        for node, upd in zip((10, 11, 12, 13), updates):
            messages += [Sent("down", "train", r, node, 0, 0, arrays={"w": model.clone()}),
                         Sent("up", "train", r, node, 0, 0, arrays={"w": model + upd})]
        clipped = [u * min(1.0, clip / float(u.norm())) for u in updates]
        model = model + torch.stack(clipped).mean(0) + noise_multiplier * clip / 4 * torch.randn(600, generator=gen)
    models.append(Broadcast("evaluate", rounds, {"w": model.clone()}, [], True))
    trajectory = ClipTrajectory({r: c for r, c in enumerate(clips, start=1)}, final=clips[-1])
    return AppRun(messages, [], partitions={10: 2, 11: 3, 12: 0, 13: 1}, models=models, canary_plan=plan,
                  canaries={10: 0, 11: 1}, clips=trajectory), plan


@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_canaries_read_each_round_in_its_own_clip():
    """The clip grows 8-fold over the rounds: read in the round's clip each canary moves the sum by one clip (read
    in the first round's, the later rounds would look 8 times as revealing), and the fit holds the setting."""
    clips = [0.25 * 2 ** (i // 4) for i in range(12)]
    run, plan = _adaptive_run(clips, 0.8)
    z_in, z_out, s_in, _, rounds = scores(run, plan, unseen=300)
    assert list(rounds) == list(range(1, 13))
    assert (s_in * z_in).mean() == pytest.approx(1.0, abs=0.35) and z_out.std() == pytest.approx(0.8, rel=0.15)
    found = [{"mechanism": "DifferentialPrivacyServerSideAdaptiveClipping", "noise_multiplier_measured": 0.8}]
    out = measure(run, found, delta=1e-5, unseen=300)
    assert out is not None and out["verdict"].startswith("consistent"), out["verdict"]
    assert out["epsilon_interval"][0] <= out["epsilon_planned"] <= out["epsilon_interval"][1]
    assert "noise multiplier" in out["claim"]
    as_ran = [{**found[0], "mu_mean_as_run": math.sqrt(12) / 0.9, "adaptive_clips": {r: 1.0 for r in range(1, 13)}}]
    out = measure(run, as_ran, delta=1e-5, unseen=300)  # the mean as it ran: z 0.9 over the 12 rounds
    assert out is not None and out["noise_multiplier_planned"] == pytest.approx(0.9) and "as it ran" in out["claim"]


def test_a_round_whose_clip_was_not_noted_is_left_out():
    run, plan = _adaptive_run([0.5] * 4, 0.8)
    assert run.clips is not None
    del run.clips.clips[2]
    *_, rounds = scores(run, plan, unseen=10)
    assert list(rounds) == [1, 3, 4]


def test_a_canary_s_norm_follows_the_clip_noted_for_its_round(tmp_path):
    plan = CanaryPlan(count=2, partitions=6, norm=1.0, clip=0.5, seed=0, adaptive=True)
    (tmp_path / CLIPS).write_text(json.dumps({"1": 0.5, "2": 0.3}))
    assert plan.norm_at(2, tmp_path) == pytest.approx(0.6) and plan.norm_at(1, tmp_path) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no adaptive clip was noted for round 3"):
        plan.norm_at(3, tmp_path)
    fixed = CanaryPlan(count=2, partitions=6, norm=1.0, clip=0.5, seed=0)
    assert fixed.norm_at(3, None) == 1.0
