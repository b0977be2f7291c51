"""Canary clients in a Flower app (``app_audit/canary_client.py``, ``app_audit/canaries.py``): a canary's reply is
the model received plus its planted update, passed through the app's own mods; the server's side reads each round's
release along every canary's direction, and a mechanism whose noise is not what its setting says is caught."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.app.message_type import MessageType
from flwr.client.mod.utils import make_ffn
from flwr.clientapp import ClientApp
from flwr.supercore.task_identity import TaskIdentity

from privbench.app_audit.canaries import UNSEEN, fit, measure, scores
from privbench.app_audit.canary_client import CanaryPlan, canary_call, canary_change, unwrapped
from privbench.app_audit.recording import Broadcast, Sent
from privbench.app_audit.simulation import AppRun
from privbench.defenses.client_dp.canary_clients import CanaryClients, verdict
from privbench.errors import ConfigError

SHAPES = {"w": torch.Size([3, 4]), "b": torch.Size([4])}


@pytest.fixture
def task_identity(monkeypatch):
    for attr in ("_run_id", "_task_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, attr, 1)


def _message(round_: int) -> Message:
    arrays = {"w": Array(np.full((3, 4), 0.5, np.float32)), "b": Array(np.zeros(4, np.float32)),
              "n": Array(np.array([7], np.int64))}
    return Message(RecordDict({"arrays": ArrayRecord(arrays), "config": ConfigRecord({"server-round": round_})}),
                   dst_node_id=1, message_type=MessageType.TRAIN)


def test_unwrapping_gives_the_registered_function_and_its_mods_outermost_first():
    def fn(msg, ctx):  # pragma: no cover (never called)
        return msg

    def first(msg, ctx, call):  # pragma: no cover
        return call(msg, ctx)

    def second(msg, ctx, call):  # pragma: no cover
        return call(msg, ctx)

    assert unwrapped(make_ffn(fn, [first, second])) == (fn, [first, second])
    assert unwrapped(fn) == (fn, [])
    app = ClientApp(mods=[first])  # the app's own mods come before a function's
    app.train(mods=[second])(fn)
    assert unwrapped(app._registered_funcs["train.default"]) == (fn, [first, second])


def test_a_reply_not_named_as_the_model_or_a_message_without_a_round_is_refused_in_one_line(task_identity):
    app = ClientApp()

    @app.train()
    def train(msg, ctx):
        return Message(RecordDict({"arrays": ArrayRecord({"other": Array(np.zeros(3, np.float32))})}), reply_to=msg)

    plan = CanaryPlan(count=2, partitions=3, norm=2.0, clip=1.0, seed=0)
    context = Context(run_id=1, node_id=1, node_config={"partition-id": 2}, state=RecordDict(), run_config={})
    with pytest.raises(ValueError, match="not named as the model received"):
        canary_call(app, _message(1), context, plan, 1)
    bare = Message(RecordDict({"arrays": ArrayRecord({"w": Array(np.zeros(3, np.float32))})}), dst_node_id=1,
                   message_type=MessageType.TRAIN)
    with pytest.raises(ValueError, match="states no round"):
        canary_call(app, bare, context, plan, 1)


def test_a_canary_s_reply_is_the_model_received_plus_its_update_through_the_app_s_mods(task_identity):
    calls = []
    app = ClientApp()

    def halve(msg, ctx, call):  # a mod that halves the change from the model received, as a clip would
        reply = call(msg, ctx)
        for name in ("w", "b"):
            sent, got = msg.content["arrays"][name].numpy(), reply.content["arrays"][name].numpy()
            reply.content["arrays"][name] = Array((sent + 0.5 * (got - sent)).astype(np.float32))
        return reply

    @app.train(mods=[halve])
    def train(msg, ctx):
        calls.append(msg.metadata.message_type)
        arrays = {n: Array(np.full(a.shape, 9.0, a.dtype)) for n, a in
                  ((n, msg.content["arrays"][n].numpy()) for n in ("w", "b", "n"))}
        return Message(RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 7})}),
                       reply_to=msg)

    plan = CanaryPlan(count=2, partitions=5, norm=3.0, clip=1.5, seed=4, mechanism="local")
    context = Context(run_id=1, node_id=1, node_config={"partition-id": 4}, state=RecordDict(), run_config={})
    reply = canary_call(app, _message(2), context, plan, plan.index(4))
    canaries = CanaryClients(2, shapes=SHAPES, seed=4)
    u = canaries.directions(1, 2)[0]  # partition 4 of 5 is the second canary
    expected = canaries.state(0.5 * canaries.sign(1, 2) * 3.0 * u)
    assert calls == ["train"] and reply.content["metrics"]["num-examples"] == 7  # the app's own reply, planted
    assert np.allclose(reply.content["arrays"]["w"].numpy(), 0.5 + expected["w"].numpy(), atol=1e-6)
    assert np.allclose(reply.content["arrays"]["b"].numpy(), expected["b"].numpy(), atol=1e-6)
    assert reply.content["arrays"]["n"].numpy().tolist() == [7]  # a canary trains nothing: as received
    assert float(torch.cat([v.flatten() for v in canary_change(plan, 1, 2, SHAPES).values()]).norm()) == \
        pytest.approx(3.0)
    again = app(_message(2), context)  # the app's own function is back in place
    assert np.allclose(again.content["arrays"]["w"].numpy(), 0.5 + 0.5 * 8.5)
    assert (plan.index(2), plan.index(3), plan.index(5)) == (None, 0, None)


def _fit_of(noise: float, *, mu_round: float = 1.0, canaries: int = 40, rounds: int = 3, seed: int = 0,
            joined: float = 1.0) -> tuple:
    rng = np.random.default_rng(seed)
    s_in = rng.choice([-1.0, 1.0], size=(canaries, rounds)) * (rng.random((canaries, rounds)) < joined)
    s_out = rng.choice([-1.0, 1.0], size=(200, rounds))
    z_in = s_in * mu_round * noise + rng.normal(0, noise, size=s_in.shape)  # a shift of mu_round noise units
    z_out = rng.normal(0, noise, size=s_out.shape)
    return fit(z_in, z_out, s_in, s_out, delta=1e-5)


@pytest.mark.parametrize("joined", [1.0, 0.5])
def test_the_fit_recovers_mu_of_a_client_in_every_round(joined):
    est = _fit_of(0.7, joined=joined)  # mu 1 a round, 3 rounds: sqrt(3) for a client in all of them
    assert est.mu_interval[0] < math.sqrt(3) < est.mu_interval[1]
    assert est.mu == pytest.approx(math.sqrt(3), abs=0.5) and est.noise == pytest.approx(0.7, rel=0.1)
    few = _fit_of(0.7, canaries=2, rounds=2)  # two canaries prove little: a wide interval
    assert few.mu_interval[1] - few.mu_interval[0] > 2


def _central_run(noise_std: float, *, rounds: int = 12, clip: float = 1.0, seed: int = 0) -> tuple[AppRun, CanaryPlan]:
    """A run of 2 canary clients and 2 of the app's own through a central mechanism: each update clipped to
    ``clip``, the mean released with Gaussian noise of ``noise_std`` per coordinate (DP-FedAvg's z C / m)."""
    shapes = {"w": torch.Size([600])}
    plan = CanaryPlan(count=2, partitions=4, norm=2 * clip, clip=clip, seed=seed, mechanism="central")
    gen = torch.Generator().manual_seed(seed)
    model, messages, models = torch.zeros(600), [], []
    for r in range(1, rounds + 1):
        models.append(Broadcast("train", r, {"w": model.clone()}, [], True))
        updates = [canary_change(plan, j, r, shapes)["w"] for j in range(2)]
        updates += [3 * clip * torch.randn(600, generator=gen) / 600 ** 0.5 for _ in range(2)]
        for node, upd in zip((10, 11, 12, 13), updates):
            messages += [Sent("down", "train", r, node, 0, 0, arrays={"w": model.clone()}),
                         Sent("up", "train", r, node, 0, 0, arrays={"w": model + upd})]
        clipped = [u * min(1.0, clip / float(u.norm())) for u in updates]
        model = model + torch.stack(clipped).mean(0) + noise_std * torch.randn(600, generator=gen)
    models.append(Broadcast("evaluate", rounds, {"w": model.clone()}, [], True))
    run = AppRun(messages, [], partitions={10: 2, 11: 3, 12: 0, 13: 1}, models=models, canary_plan=plan,
                 canaries={10: 0, 11: 1})
    return run, plan


def test_canary_scores_read_a_central_release_in_clip_units():
    run, plan = _central_run(0.2)  # z = 0.2 * 4 / 1 = 0.8 clip norms on the sum
    z_in, z_out, s_in, s_out, rounds = scores(run, plan)
    assert list(rounds) == list(range(1, 13)) and z_in.shape == (2, 12) and z_out.shape == (UNSEEN, 12)
    assert np.abs(s_in).min() == 1  # both canaries sent to every round
    assert (s_in * z_in).mean() == pytest.approx(1.0, abs=0.35)  # each canary moves the sum by one clip norm
    assert z_out.std() == pytest.approx(0.8, rel=0.1)


@pytest.mark.parametrize(("noise_std", "broken"), [(0.2, False), (0.02, True)])
def test_a_central_mechanism_whose_noise_is_not_its_setting_is_caught(noise_std, broken):
    run, _ = _central_run(noise_std)
    found = [{"mechanism": "DifferentialPrivacyServerSideFixedClipping", "noise_multiplier_measured": 0.8}]
    out = measure(run, found, delta=1e-5)
    assert out is not None and out["rounds_observed"] == list(range(1, 13))
    assert out["verdict"].startswith("BROKEN") == broken, out["verdict"]
    if broken:  # a tenth of the noise its setting says: the diagnostic names it
        assert "noise calibrated to another sensitivity or scale" in out["verdict"]
        # the sum's noise, 4 x 0.02 clip norms, and the two app clients' clipped updates (norm 1) along a random
        # direction of 600 dimensions (variance 1 / 600 each)
        assert out["noise_measured"] == pytest.approx(math.sqrt(0.08 ** 2 + 2 / 600), rel=0.1)
    else:
        assert out["epsilon_interval"][0] <= out["epsilon_planned"] <= out["epsilon_interval"][1]


def test_without_a_dp_mechanism_canaries_are_refused_in_one_line_and_an_adaptive_clip_is_named():
    from flwr.serverapp.strategy import FedAvg

    from privbench.app_audit.canaries import mechanism_clip

    class DifferentialPrivacyServerSideAdaptiveClipping:
        clipping_norm = 1.0
        strategy = FedAvg()

    class FedAdam:
        pass

    class DifferentialPrivacyServerSideFixedClipping:
        clipping_norm = 0.5
        strategy = FedAdam()

    with pytest.raises(ConfigError, match="wraps FedAdam, whose next model is not the mean"):
        mechanism_clip([DifferentialPrivacyServerSideFixedClipping()], ClientApp())

    with pytest.raises(ConfigError, match="runs no client-level DP mechanism"):
        mechanism_clip([object()], ClientApp())
    assert mechanism_clip([DifferentialPrivacyServerSideAdaptiveClipping()], ClientApp()) == (1.0, "central", True)


def test_the_verdict_of_an_honest_fit_is_not_broken():
    est = _fit_of(0.5, canaries=30, rounds=4, seed=3)
    from privbench.defenses.calibration import epsilon

    assert not verdict(est, claimed=epsilon(1.0, [(1.0, 4)], delta=1e-5), planned_noise=0.5).startswith("BROKEN")


def test_a_canary_weighed_above_its_share_is_named_and_the_attacks_leave_canaries_out():
    run, _ = _central_run(0.2, rounds=4)
    for m in run.messages:  # FedAvg weighs by num-examples: the canaries hold 300 records, the others 100
        if m.direction == "up":
            m.metrics["num-examples"] = 300 if m.node in (10, 11) else 100
    found = [{"mechanism": "DifferentialPrivacyServerSideFixedClipping", "noise_multiplier_measured": 0.8}]
    out = measure(run, found, delta=1e-5)
    assert out["canary_share"] == pytest.approx(4 * 300 / 800)  # 1.5 times the 1 / 4 the noise assumes
    assert "weighs the updates by num-examples" in out["verdict"]
    kept = run.without(set(run.canaries))
    assert {m.node for m in kept.messages} == {12, 13} and set(kept.partitions) == {12, 13} and not kept.canaries


def test_the_command_refuses_too_few_or_too_many_canaries_before_it_runs(capsys):
    from pathlib import Path

    from privbench.app_audit.command import main

    app = Path(__file__).resolve().parents[1] / "examples" / "central-dp"
    for k in ("1", "4"):
        assert main([str(app), "--canaries", k, "--out", "/nonexistent/never-written"]) == 2
        assert "needs at least 2 canary clients and at least one of the app's own" in capsys.readouterr().err
