"""Canary records in a client's Opacus DP-SGD (``--record-canaries``): planted beside the batch before Opacus clips,
read from the uploads. In process, a small CNN trained by Opacus under ``planting`` as a ClientApp would, with the
mechanism broken on purpose (noise scaled down, clipping skipped, noise reused across rounds) and caught; end to end,
the Opacus example audited as a user runs it."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from privbench.app_audit import record_canaries
from privbench.app_audit.record_canary_client import RecordPlan, planned_noise, planned_shift, planting, unit
from privbench.app_audit.recording import Sent
from privbench.app_audit.simulation import AppRun

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RATE, STEPS = 32 / 256, 8  # batch 32 of 256 records: Poisson rate 1/8, 8 steps a round


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 6, 5, stride=2)
        self.fc = nn.Linear(6 * 12 * 12, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.conv(x)).flatten(1))


def train(rounds: int, *, plan: RecordPlan, noise: float = 1.0, reseed: bool = False, adam: bool = False,
          engine: bool = True, prefix: str = "", schedule: bool = False,
          second: bool = False) -> tuple[AppRun, list[dict[str, Any]]]:
    """A host client's rounds of DP-SGD (a fresh engine each round, as Flower's Opacus example), recorded as the
    audit records them: the model sent, the model uploaded, the client's notes."""
    from opacus import PrivacyEngine
    from opacus.accountants import RDPAccountant
    from opacus.optimizers import DPOptimizer

    torch.manual_seed(0)
    x, y = torch.randn(256, 1, 28, 28), torch.randint(0, 10, (256,))
    state = Net().state_dict()
    messages, notes = [], []
    for r in range(1, rounds + 1):
        torch.manual_seed(7 if reseed else 7 + r)  # reseed: the same seed every round, as the Opacus example does
        net = Net()
        net.load_state_dict(state)
        with planting(plan, r) as planted, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inner = torch.optim.Adam(net.parameters(), lr=1e-3) if adam else torch.optim.SGD(net.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(x, y), batch_size=32)
            if engine:
                model, opt, loader = PrivacyEngine().make_private(module=net, optimizer=inner, data_loader=loader,
                                                                  noise_multiplier=noise, max_grad_norm=1.0)
            else:  # built by hand, outside an engine
                from opacus import GradSampleModule

                model = GradSampleModule(net)
                opt = DPOptimizer(inner, noise_multiplier=noise, max_grad_norm=1.0, expected_batch_size=32)
            for xb, yb in loader:
                if len(yb):
                    opt.zero_grad()
                    F.cross_entropy(model(xb), yb).backward()
                    opt.step()
                    if schedule:  # as Opacus's noise scheduler: the multiplier falls each step
                        opt.noise_multiplier *= 0.9
            if second:  # another engine in the same call, on another model
                other = Net()
                m2, o2, l2 = PrivacyEngine().make_private(module=other, optimizer=torch.optim.SGD(other.parameters(),
                                                          lr=0.1), data_loader=DataLoader(TensorDataset(x, y),
                                                          batch_size=32), noise_multiplier=1.0, max_grad_norm=1.0)
                xb, yb = next(iter(l2))
                F.cross_entropy(m2(xb), yb).backward()
                o2.step()
        upload = {f"{prefix}{k}": v.clone() for k, v in net.state_dict().items()}
        messages += [Sent("down", "train", r, 1, 0, 0, {k: v.clone() for k, v in state.items()}),
                     Sent("up", "train", r, 1, 0, 0, upload)]
        notes.append({"node": 1, "type": "train", "record_canaries": planted.as_dict()})
        state = net.state_dict()
    accountant = RDPAccountant()
    accountant.history = [(1.0, RATE, STEPS * rounds)]  # what the host's accountant is told: noise 1, by hand
    found = [{"mechanism": "Opacus DP-SGD", "client": "client0", "epsilon_measured": accountant.get_epsilon(1e-5)}]
    return AppRun(messages, notes, partitions={1: 0}, record_plan=plan), found


PLAN = RecordPlan(256, host=0, seed=11)


def test_an_honest_dp_sgd_is_consistent_and_its_noise_and_shift_are_the_setting_s():
    run, found = train(2, plan=PLAN)
    planted = run.notes[0]["record_canaries"]
    assert planted["clips"] == [1.0] * STEPS and planted["noise_multipliers"] == [1.0] * STEPS
    assert planted["sample_rate"] == RATE
    assert planted["step_scales"] == pytest.approx([0.1 / 32] * STEPS)  # lr over the expected batch, each step
    assert sum(planted["joined"]) / 256 == pytest.approx(RATE * STEPS, abs=0.25)  # about one join a round each
    out = record_canaries.measure(run, found, delta=1e-5)
    assert out is not None and out["verdict"].startswith("consistent"), out["verdict"]
    assert out["noise_planned"] == pytest.approx(math.sqrt(STEPS)) and out["shift_planned"] == pytest.approx(1.0)
    assert out["noise_measured"] == pytest.approx(math.sqrt(STEPS), rel=0.1)  # sqrt(8) clip norms: noise 1 a step
    assert out["canary_shift"] == pytest.approx(1.0, abs=0.35)  # clipped to 1, joins at 1/8 for 8 steps
    assert out["mu_planned"] == pytest.approx(math.sqrt(2) / math.sqrt(STEPS))
    assert out["mu_interval"][0] <= out["mu_planned"] * 1.2 and abs(out["round_correlation"]) < 0.2


def test_a_dp_optimizer_that_adds_less_noise_than_its_accountant_is_told_is_caught(monkeypatch):
    import opacus.optimizers.optimizer as dp

    original = dp._generate_noise
    monkeypatch.setattr(dp, "_generate_noise", lambda std, reference, generator=None, secure_mode=False:
                        original(0.3 * std, reference, generator, secure_mode))
    run, found = train(2, plan=PLAN)
    out = record_canaries.measure(run, found, delta=1e-5)
    assert out is not None and out["verdict"].startswith("BROKEN") and "adds less noise" in out["verdict"]
    assert out["noise_measured"] == pytest.approx(0.3 * math.sqrt(STEPS), rel=0.2)


def test_gradients_that_skip_clipping_are_caught(monkeypatch):
    from opacus.optimizers import DPOptimizer

    clip = DPOptimizer.clip_and_accumulate

    def unclipped(self: Any) -> None:  # every per-sample gradient summed as it is
        bound, self.max_grad_norm = self.max_grad_norm, 1e9
        try:
            clip(self)
        finally:
            self.max_grad_norm = bound

    monkeypatch.setattr(DPOptimizer, "clip_and_accumulate", unclipped)
    run, found = train(2, plan=PLAN)
    out = record_canaries.measure(run, found, delta=1e-5)
    assert out is not None and "not clipped" in out["verdict"] and out["verdict"].startswith("BROKEN")
    assert out["canary_shift"] == pytest.approx(2.0, abs=0.4)  # twice the clip, as planted


def test_noise_reused_across_rounds_is_caught():
    """A client that seeds torch alike each round draws Opacus's noise alike: differencing rounds cancels it."""
    run, found = train(3, plan=PLAN, reseed=True)
    out = record_canaries.measure(run, found, delta=1e-5)
    assert out is not None and out["verdict"].startswith("BROKEN") and "noise reused across rounds" in out["verdict"]
    assert out["round_correlation"] > 0.9
    honest = record_canaries.measure(*train(3, plan=PLAN), delta=1e-5)
    assert honest is not None and honest["verdict"].startswith("consistent") and honest["mu"] < out["mu"] / 2


def test_a_noise_schedule_is_followed_step_by_step_and_is_no_false_alarm():
    run, found = train(2, plan=PLAN, schedule=True)
    planted = run.notes[0]["record_canaries"]
    assert planted["noise_multipliers"] == pytest.approx([0.9 ** t for t in range(STEPS)])
    out = record_canaries.measure(run, found, delta=1e-5)
    assert out is not None and out["noise_planned"] == pytest.approx(math.sqrt(sum(0.81 ** t for t in range(STEPS))))
    assert out["noise_measured"] == pytest.approx(out["noise_planned"], rel=0.12)
    assert "adds less noise" not in out["verdict"]


def test_a_second_dp_optimizer_in_the_call_is_named_and_no_estimate_is_made():
    run, found = train(1, plan=PLAN, second=True)
    out = record_canaries.measure(run, found, delta=1e-5)
    assert out is not None and out["verdict"] == ("not estimated: a second DP optimizer stepped in the train call; "
                                                  "the canaries ride in one")


def test_a_step_of_unknown_scale_is_read_without_the_setting_s_noise_and_opacus_names_are_matched():
    run, found = train(2, plan=PLAN, adam=True, prefix="_module.")
    out = record_canaries.measure(run, found, delta=1e-5)
    assert out is not None and out["scale_known"] is False and out["noise_planned"] is None
    assert out["rounds_observed"] == [1, 2] and not out["verdict"].startswith("BROKEN")


def test_a_dp_optimizer_made_outside_an_engine_carries_no_canary_and_says_so():
    run, found = train(1, plan=PLAN, engine=False)
    out = record_canaries.measure(run, found, delta=1e-5)
    assert out is not None and out["verdict"].startswith("not estimated: no step of a DP optimizer made by an Opacus")


def test_the_settings_figures_are_those_of_a_hand_count():
    from privbench.app_audit.record_canary_client import Planted

    p = Planted(round=1, sample_rate=0.25, noise_multipliers=[2.0] * 4, clips=[1.0] * 4,
                step_scales=[1.0, 1.0, 2.0, 2.0])
    assert planned_shift(p) == 1.0 and unit(p) == 1.5
    assert planned_noise(p) == pytest.approx(2.0 * math.sqrt(10) / 1.5)  # root of the squared scales over their mean
    p.clips = [1.0, 1.0, 0.5, 0.5]  # the clip moved: each step's noise is z C_t s_t, its unit C_t s_t
    assert unit(p) == 1.0 and planned_noise(p) == pytest.approx(2.0 * math.sqrt(1 + 1 + 1 + 1) / 1.0)


def test_the_shift_s_bound_counts_the_unseen_directions_error_too():
    """With many canaries the unseen directions' mean is the shift's larger error: 10,000 canaries, 2 rounds, 1,000
    unseen, noise 3 a round, a shift of 1.4 against the setting's 1.0 is within it (bound 1.22, not above 1.3); 1.6
    is not (bound 1.42); and every diagnostic found is said, not only the first."""
    from privbench.defenses.client_dp.canary_clients import Estimate

    def said(shift: float, noise: float = 3.0) -> str:
        est = Estimate(0.1, (0.05, 0.15), 0.5, (0.2, 0.8), 0.1, shift, noise, 0.0, 10_000, 2)
        return record_canaries.verdict(est, claimed=5.0, shift=1.0, noise=3.0, unseen=1000, spread=3.0, null=3.0)

    assert said(1.4).startswith("consistent") and "not clipped" in said(1.6)
    both = said(1.6, noise=1.0)
    assert both.startswith("BROKEN") and "adds less noise" in both and "not clipped" in both


def test_the_command_refuses_a_count_out_of_range_before_it_runs(capsys):
    from privbench.app_audit.command import main

    for k in ("99", "100001"):
        assert main([str(EXAMPLES / "opacus-dp-sgd"), "--record-canaries", k, "--out", "/nonexistent/x"]) == 2
        assert f"--record-canaries {k}: must be 100 to 100000 canary records" in capsys.readouterr().err


def test_the_report_and_the_gate_read_the_canary_records():
    from privbench.app_audit.audit import gate_figures
    from privbench.app_audit.gate import Rule
    from privbench.app_audit.report import markdown

    run, found = train(2, plan=PLAN, reseed=True)
    out = record_canaries.measure(run, found, delta=1e-5)
    assert out is not None
    figures = gate_figures([], found, {}, record=out)
    assert figures["record_epsilon_empirical_lower"] == out["epsilon_alarm"]
    failed, why = Rule.parse("record_epsilon_empirical_lower>0.5").check(figures)
    assert failed == (out["epsilon_alarm"] > 0.5) and "record_epsilon_empirical_lower = " in why
    summary = {"app": {"name": "demo", "supernodes": 3, "rounds": 2, "seed": 0, "strategy": "FedAvg", "mods": []},
               "command": "", "notes": [], "problems": [], "bytes": {}, "mechanisms": [],
               "uploads": [], "gate": [], "record_canaries": out}
    md = markdown(summary)
    assert "## Canary records: an empirical record-level epsilon of DP-SGD" in md
    assert f"| 256 in client0's DPOptimizer, 1000 unseen | 1, 2 | {out['mu']:.3g} [" in md


@pytest.mark.slow
def test_the_opacus_example_reuses_its_noise_each_round_and_the_canary_records_catch_it(tmp_path):
    """The example seeds torch alike at each train call (for repeatable figures), so Opacus's noise repeats each
    round; with the seed moved by the round, the same audit is consistent."""
    fixed = tmp_path / "fixed"
    shutil.copytree(EXAMPLES / "opacus-dp-sgd", fixed)
    client = fixed / "opacus_app" / "client_app.py"
    source = client.read_text()
    assert 'torch.manual_seed(7 + int(context.node_config["partition-id"]))' in source
    client.write_text(source.replace('torch.manual_seed(7 + int(context.node_config["partition-id"]))',
                                     'torch.manual_seed(7 + int(context.node_config["partition-id"]) '
                                     '+ 1000 * int(msg.content["config"]["server-round"]))'))
    outs = {}
    for name, app in (("example", EXAMPLES / "opacus-dp-sgd"), ("fixed", fixed)):
        done = subprocess.run([sys.executable, "-m", "privbench", "audit-app", str(app), "--out",
                               str(tmp_path / name), "--record-canaries", "512", "--run-config",
                               "num-server-rounds=3", "--fail-on", "misconfigured"],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 1, done.stderr[-2000:]  # the reports count one round each: misconfigured anyway
        folder = next((tmp_path / name).iterdir())
        outs[name] = json.loads((folder / "metrics.json").read_text())
    example, fixed_out = outs["example"]["record_canaries"], outs["fixed"]["record_canaries"]
    assert example["verdict"].startswith("BROKEN") and "noise reused across rounds" in example["verdict"]
    assert any(p.startswith("canary records: BROKEN") for p in outs["example"]["problems"])
    assert fixed_out["verdict"].startswith("consistent") and fixed_out["round_correlation"] < 0.3
    assert example["epsilon_accountant"] == pytest.approx(fixed_out["epsilon_accountant"])
    assert {u["client"] for u in outs["example"]["uploads"]} == {"client1", "client2"}  # the host is not attacked
