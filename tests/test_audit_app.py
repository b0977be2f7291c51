"""``privbench audit-app``'s parts, without running Flower's simulation: the app's declaration and its checks, the
recording grid's measures, the client-side notes, the privacy mechanisms measured, the declared training, the gate.
The end-to-end runs on the example apps are in ``test_audit_app_runs.py``."""
from __future__ import annotations

import math
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.app.message_type import MessageType
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import LocalDpMod
from flwr.common.serde import recorddict_to_proto
from flwr.supercore.task_identity import TaskIdentity
from torch.utils.data import DataLoader, TensorDataset

from privbench.app_audit import privacy
from privbench.app_audit.app import AppError, read_app
from privbench.app_audit.client_side import batch_records, noting_loaders
from privbench.app_audit.gate import Rule, junit
from privbench.app_audit.recording import RecordingGrid, Sent
from privbench.app_audit.simulation import AppRun
from privbench.app_audit.training import Declared, ask, local_training
from privbench.errors import AttackNotApplicableError, ConfigError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def task_identity(monkeypatch):
    """Flower stamps messages with the running task's identity; a ServerApp sets it, here the test does."""
    for attr in ("_run_id", "_task_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, attr, 1)


def _app(tmp_path: Path, body: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(body))
    return tmp_path


APP = """
[project]
name = "pkg"
version = "1.0.0"
[tool.flwr.app]
publisher = "me"
[tool.flwr.app.components]
serverapp = "pkg.server:app"
clientapp = "pkg.client:app"
[tool.flwr.app.config]
lr = 0.1
num-server-rounds = 2
[tool.flwr.federations]
default = "sim"
[tool.flwr.federations.sim]
options.num-supernodes = 5
"""


def test_an_app_is_read_as_flwr_run_reads_it(tmp_path):
    app = read_app(_app(tmp_path, APP), overrides={"lr": 0.5})
    assert (app.serverapp, app.clientapp, app.supernodes) == ("pkg.server:app", "pkg.client:app", 5)
    assert app.run_config == {"lr": 0.5, "num-server-rounds": 2}
    assert read_app(EXAMPLES / "quickstart-pytorch").run_config["batch-size"] == 32


@pytest.mark.parametrize("body, overrides, words", [
    (None, None, "no such file"),
    ("", None, "not a Flower app (no [tool.flwr.app.components]"),
    ("[tool.flwr.app.components]\nserverapp = 'a.b'\nclientapp = 'c:d'\n", None, "expected 'module:attribute'"),
    ("[[not toml", None, "not valid TOML"),
    (APP, {"learning-rate": 1.0}, "--run-config learning-rate: the app's [tool.flwr.app.config] has no such key"),
    (APP.replace("options.num-supernodes = 5", 'address = "10.1.2.3:9093"'), None, "beyond this machine"),
    (APP.replace("= 5", "= 1"), None, "num-supernodes = 1"),
    (APP.replace('publisher = "me"', ""), None, "Flower refuses it: Property \"publisher\" missing in [tool.flwr.app]"),
])
def test_what_is_not_an_app_this_audit_can_run_is_named_in_one_line(tmp_path, body, overrides, words):
    path = tmp_path / "missing" if body is None else _app(tmp_path, body)
    with pytest.raises(AppError, match=None) as err:
        read_app(path, overrides=overrides)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_loopback_federation_is_deployed_unless_asked_otherwise_and_the_audit_says_so(tmp_path):
    path = _app(tmp_path, APP.replace("options.num-supernodes = 5", 'address = "127.0.0.1:9093"'))
    app = read_app(path)
    assert app.deployment and app.supernodes == 2 and "names a deployment at 127.0.0.1:9093" in app.notes[0]
    assert "the audit deploys it on this machine" in app.notes[0]
    simulated = read_app(path, engine="simulation")
    assert not simulated.deployment and "runs it in Flower's simulation (--engine)" in simulated.notes[0]
    plain = read_app(_app(tmp_path, APP))
    assert plain.notes == () and not plain.deployment and read_app(_app(tmp_path, APP), engine="deployment").deployment


def _message(arrays: dict[str, np.ndarray], kind: str = MessageType.TRAIN, **config) -> Message:
    content = RecordDict({"arrays": ArrayRecord({n: Array(a) for n, a in arrays.items()}), "config": ConfigRecord(config)})
    return Message(content, dst_node_id=7, message_type=kind)


class EchoGrid:
    """A grid whose node 7 replies to each message with its arrays doubled, except node 8, which never replies."""

    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    def send_and_receive(self, messages, *, timeout=None):
        self.timeouts.append(timeout)
        replies = []
        for i, m in enumerate(messages):
            m.metadata.__dict__["_message_id"] = f"m{len(self.timeouts)}-{i}"
            if m.metadata.dst_node_id == 8:
                continue
            arrays = {n: Array(a.numpy() * 2) for n, a in m.content["arrays"].items()}
            reply = Message(RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 3})}),
                            reply_to=m)
            replies.append(reply)
        return replies


def test_the_grid_records_each_message_both_ways_with_its_bytes_and_round(task_identity):
    grid = RecordingGrid(EchoGrid(), reply_timeout=30)
    message = _message({"w": np.ones((10, 10), np.float32)}, **{"server-round": 3, "lr": 0.1})
    replies = list(grid.send_and_receive([message], timeout=3600))
    wire = recorddict_to_proto(message.content).ByteSize()
    assert grid.grid.timeouts == [30]  # the strategy's hour is capped at the audit's reply timeout
    down, up = grid.messages
    assert (down.direction, down.round, down.node, down.array_bytes, down.wire_bytes) == ("down", 3, 7, 400, wire)
    assert down.config == {"server-round": 3, "lr": 0.1}
    assert (up.direction, up.round, up.array_bytes, up.metrics) == ("up", 3, 400, {"num-examples": 3})
    assert up.wire_bytes == recorddict_to_proto(replies[0].content).ByteSize() > 400
    torch.testing.assert_close(up.arrays["w"], torch.full((10, 10), 2.0))
    assert up.message_id == down.message_id and not grid.unanswered()


def test_a_message_no_reply_answers_is_found(task_identity):
    grid = RecordingGrid(EchoGrid())
    silent = _message({"w": np.zeros(3, np.float32)})
    silent.metadata.__dict__["_dst_node_id"] = 8
    grid.send_and_receive([silent, _message({"w": np.zeros(3, np.float32)})])
    assert [m.node for m in grid.unanswered()] == [8]
    assert [m.round for m in grid.messages] == [1, 1, 1]  # no server-round: the first batch of train messages


@pytest.mark.parametrize("batch, rows", [
    ((torch.zeros(4, 1, 2, 2), torch.arange(4)), 4),
    ({"img": torch.zeros(3, 5), "label": torch.tensor([1, 2, 3]), "id": "x"}, 3),
    ([torch.zeros(2, 3, 4, 4), torch.tensor([0, 1])], 2),
    ((torch.zeros(4, 5), torch.zeros(4)), None),  # no integer labels
    ((torch.zeros(4), torch.arange(4)), None),  # no input of two dimensions
])
def test_a_batch_yields_its_inputs_and_labels(batch, rows):
    pair = batch_records(batch)
    assert (pair is None) if rows is None else (len(pair[0]) == len(pair[1]) == rows)


def test_the_loaders_notes_are_what_the_loader_yielded_and_the_loader_is_put_back():
    original = DataLoader.__iter__
    x, y = torch.randn(10, 1, 3, 3), torch.arange(10)
    loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))
    held = DataLoader(TensorDataset(x[:3] + 5, y[:3]), batch_size=2)
    with noting_loaders() as seen:
        yielded = [b for b in loader]
        with torch.no_grad():  # a validation pass inside a train call: evaluated, not trained on
            list(held)
    assert [len(b) for _, b in seen.trained] == [4, 4, 2] and [len(b) for _, b in seen.evaluated] == [2, 1]
    for (nx, ny), (bx, by) in zip(seen.trained, yielded):
        torch.testing.assert_close(nx, bx)
        assert torch.equal(ny, by)
    torch.testing.assert_close(seen.joined(seen.evaluated)[0], x[:3] + 5)
    assert DataLoader.__iter__ is original
    with pytest.raises(RuntimeError), noting_loaders():
        raise RuntimeError("the app failed")
    assert DataLoader.__iter__ is original


def _run_with(arrays: dict[str, torch.Tensor], notes: list[dict] | None = None, up: list[Sent] | None = None) -> AppRun:
    down = Sent("down", "train", 1, 7, 0, 0, arrays=arrays)
    return AppRun([down, *(up or [])], notes or [], partitions={7: 0})


@pytest.mark.parametrize("sensitivity", [1.5, 1e-4])
def test_local_dp_mod_is_measured_as_it_noises_and_a_foreign_sensitivity_is_reported(task_identity, sensitivity):
    clip, epsilon, delta = 1.5, 0.8, 1e-5
    run = _run_with({"w": torch.zeros(200_000), "b": torch.zeros(10)})
    out = privacy.local_dp(run, LocalDpMod(clip, sensitivity, epsilon, delta), rounds=3, seed=0)
    std = sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / epsilon  # the mod's formula, by hand
    assert out["noise_std_measured"] == pytest.approx(std, rel=0.01)
    assert out["clip_measured"] == pytest.approx(clip, rel=1e-3)  # the same noise drawn twice cancels
    assert out["noise_multiplier_measured"] == pytest.approx(std / clip, rel=0.02)
    foreign = [p for p in out["problems"] if "noise scaled for sensitivity" in p]
    assert bool(foreign) == (sensitivity != clip)
    assert any("over 3 rounds" in p for p in out["problems"])  # the mod composes nothing


def test_the_mods_around_each_registered_function_are_found():
    mod = LocalDpMod(1.0, 1.0, 0.5, 1e-5)
    app = ClientApp()

    @app.train(mods=[mod])
    def train(msg, ctx):  # pragma: no cover (never called)
        return msg

    assert privacy.client_mods(app) == [mod]
    assert privacy.client_mods(ClientApp()) == []


@pytest.mark.parametrize("mechanism", ["prv", "rdp"])
def test_dp_sgd_is_composed_by_its_engines_accountant_and_a_per_round_claim_is_reported(mechanism):
    from opacus.accountants import create_accountant

    one_round = [(1.1, 0.125, 8)]

    def run(rounds: int) -> AppRun:
        notes = [{"node": 7, "type": "train", "dp_sgd": [{"max_grad_norm": 1.0, "history": one_round,
                                                          "accountant": mechanism, "target_delta": None}]}
                 for _ in range(rounds)]
        return _run_with({}, notes, [Sent("up", "train", r, 7, 0, 0, metrics={"epsilon": claimed})
                                     for r in range(1, rounds + 1)])

    acc = create_accountant(mechanism)
    acc.history = one_round
    claimed = acc.get_epsilon(1e-5)  # what a fresh engine reports each round
    acc.history = one_round * 3  # three engines, one per round, stepped by hand
    composed = acc.get_epsilon(1e-5)
    out = privacy.dp_sgd(run(3), "client0", 7, delta=1e-5)
    assert out["epsilon_measured"] == pytest.approx(composed, rel=1e-6) and composed > 1.2 * claimed
    assert out["epsilon_claimed"] == pytest.approx(claimed) and out["steps"] == 24
    assert "reports epsilon" in out["problems"][0]
    alone = privacy.dp_sgd(run(1), "client0", 7, delta=1e-5)  # one round: the report is right
    assert alone["epsilon_measured"] == pytest.approx(claimed, rel=1e-6) and not alone["problems"]


def test_a_dp_wrapper_told_more_clients_than_it_got_noises_less_and_is_reported():
    from opacus.accountants import RDPAccountant

    class DifferentialPrivacyServerSideFixedClipping:  # the wrapper's settings as Flower's holds them
        noise_multiplier, clipping_norm, num_sampled_clients = 1.2, 0.5, 4

    out = privacy.strategy_dp(DifferentialPrivacyServerSideFixedClipping(), sent=[4, 2, 4], delta=1e-5)
    acc = RDPAccountant()
    acc.history = [(1.2 * 2 / 4, 1.0, 3)]  # a client moves a mean of 2 by C/2: the noise multiplier halves
    assert out["noise_multiplier_measured"] == pytest.approx(0.6)
    assert out["epsilon_measured"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)
    assert "told 4 clients a round but sent to 2" in out["problems"][0]
    assert not privacy.strategy_dp(DifferentialPrivacyServerSideFixedClipping(), sent=[4, 4], delta=1e-5)["problems"]


def test_the_training_is_read_from_the_message_then_the_run_config_then_asked_for():
    training, sources = local_training(Declared(), {"lr": 0.05}, {"local-epochs": 2, "batch-size": 32, "lr": 9.0}, 100)
    assert (training.lr, training.epochs, training.batch_size, training.steps) == (0.05, 2, 32, 8)
    assert sources["lr"] == "the train message's config 'lr'" and sources["epochs"] == "the run config 'local-epochs'"
    training, sources = local_training(Declared(lr=0.2), {}, {"batch_size": 10}, 25)
    assert (training.lr, training.steps, sources["lr"]) == (0.2, 3, "--lr")
    training, sources = local_training(Declared(), {}, {}, 25)
    assert training is None and ask(sources) == ("the app states no lr and no batch size for its clients' training; "
                                                 "give --lr and --batch-size")
    with pytest.raises(ConfigError, match="--momentum"):
        Declared(momentum=1.0).check()


def test_a_rule_fails_where_its_figure_passes_its_bound_and_the_junit_file_says_so():
    figures = {"membership_auc": 0.61, "problems": ["LocalDpMod: noise scaled for ..."],
               "mechanisms": [{"mechanism": "LocalDpMod", "epsilon_claimed": 10.0, "epsilon_measured": 4e8}]}
    rules = [Rule.parse(r) for r in ("membership_auc>0.6", "membership_auc>=0.61", "membership_auc>0.61",
                                     "label_set_exact>0.5", "misconfigured", "epsilon-above-claim")]
    results = [r.check(figures) for r in rules]
    assert [f for f, _ in results] == [True, True, False, True, True, True]
    assert results[3][1].startswith("label_set_exact: not measured in this audit")  # no evidence: it cannot pass
    suite = ET.fromstring(junit(rules, results, suite="s", seconds=1.0))
    assert (suite.get("tests"), suite.get("failures")) == ("6", "5")
    assert [c.get("name") for c in suite if c.find("failure") is None] == ["membership_auc>0.61"]
    for bad in ("membership_auc<0.6", "accuracy>0.5", "membership_auc>x"):
        with pytest.raises(ConfigError, match="--fail-on"):
            Rule.parse(bad)


def test_a_bad_input_is_one_line_and_leaves_no_folder(tmp_path, capsys):
    from privbench.app_audit.command import main

    out = tmp_path / "results"
    assert main([str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert main([str(EXAMPLES / "quickstart-pytorch"), "--out", str(out), "--fail-on", "auc>0.5"]) == 2
    assert main([str(EXAMPLES / "quickstart-pytorch"), "--out", str(out), "--delta", "2"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("privbench audit-app: error: ") for line in lines)
    assert not out.exists() or not any(out.iterdir())


def test_the_input_scale_is_read_back_from_the_range_the_inputs_span():
    from privbench.app_audit.inversion import input_scale

    pixels = torch.rand(50, 2, 4, 4)
    pixels[0], pixels[1] = 0.0, 1.0  # black and white records, as image data holds
    mean, std = (0.3, 0.6), (0.2, 0.5)
    x = (pixels - torch.tensor(mean).view(1, 2, 1, 1)) / torch.tensor(std).view(1, 2, 1, 1)
    run = AppRun([], [{"inputs": x[:30], "held_inputs": x[30:]}])
    got_mean, got_std = input_scale(run)
    assert got_mean == pytest.approx(mean, abs=1e-6) and got_std == pytest.approx(std, abs=1e-6)


class DLGLeNet(torch.nn.Module):
    """DLG's LeNet (sigmoid, strided convolutions, no pooling): one image of its one-step update is invertible."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(1, 12, 5, padding=2, stride=2), torch.nn.Sigmoid(),
            torch.nn.Conv2d(12, 12, 5, padding=2, stride=2), torch.nn.Sigmoid(), torch.nn.Flatten())
        self.fc = torch.nn.Linear(12 * 7 * 7, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))


@pytest.mark.slow  # 6 s of inversion
def test_an_upload_of_one_image_is_inverted_and_scored_against_chance(tmp_path):
    from privbench.app_audit.attacks import ClientRound
    from privbench.app_audit.inversion import reconstruct
    from privbench.data.embedded import load_fashion_mnist_subset

    data = load_fashion_mnist_subset(train=False)
    x, y = (data.images[:60].float() / 255 - 0.5) / 0.5, data.labels[:60]
    torch.manual_seed(0)
    net = DLGLeNet()
    base = {k: v.clone() for k, v in net.state_dict().items()}
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(net(x[:1]), y[:1]).backward()
    opt.step()  # the client's one step on its one record
    cr = ClientRound("client0", 1, Sent("down", "train", 1, 7, 0, 0, arrays=base, config={"lr": 0.05}),
                     Sent("up", "train", 1, 7, 0, 0, arrays=dict(net.state_dict()), metrics={"num-examples": 1}),
                     (x[:1], y[:1]))
    out = reconstruct(DLGLeNet, cr, (x[20:], y[20:]), (x[10:20], y[10:20]), ((0.5,), (0.5,)), Declared(),
                      {"batch-size": 32}, max_images=8, iterations=1600, seed=0, out=tmp_path)
    assert out["recovered_fraction"] == 1.0 and out["psnr_gain"] > 5  # 21.6 dB against a chance of 11.8
    assert out["budget"] == {"attack": "fedavg_inversion", "iterations": 1600, "restarts": 1, "images": 1,
                             "count_from": "the client's num-examples"}
    with pytest.raises(AttackNotApplicableError, match="more than --max-images 0"):
        reconstruct(DLGLeNet, cr, (x[20:], y[20:]), (x[10:20], y[10:20]), ((0.5,), (0.5,)), Declared(),
                    {"batch-size": 32}, max_images=0, iterations=1, seed=0, out=tmp_path)


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_opacus_steps_are_counted_once_with_the_outermost_call_s_targets():
    import warnings

    from opacus import PrivacyEngine

    from privbench.app_audit.client_side import noting_dp_sgd

    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(40, 3), torch.randint(0, 2, (40,))), batch_size=10)

    def rounds(steps: int, history: list | None = None) -> tuple[list[dict], list]:
        net = torch.nn.Linear(3, 2)
        engine = PrivacyEngine(accountant="rdp")
        if history:
            engine.accountant.history = list(history)  # a careful app carries its history over
        with noting_dp_sgd() as notes, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, opt, loader = engine.make_private_with_epsilon(
                module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), data_loader=data, epochs=1,
                target_epsilon=5.0, target_delta=1e-3, max_grad_norm=0.7, poisson_sampling=False)
            for i, (x, y) in enumerate(loader):
                if i == steps:
                    break
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
        return notes, engine.accountant.history

    notes, history = rounds(3)
    (note,) = notes
    assert (note["call"], note["target_delta"], note["max_grad_norm"]) == ("make_private_with_epsilon", 1e-3, 0.7)
    assert sum(n for _, _, n in note["history"]) == 3 and note["accountant"] == "rdp"
    again, _ = rounds(2, history)  # 3 steps restored, 2 taken: 2 counted
    assert sum(n for _, _, n in again[0]["history"]) == 2


def test_gdp_composition_counts_every_round():
    from opacus.accountants import GaussianAccountant

    out = privacy._composed([(1.0, 0.1, 100)] * 3, "gdp", 1e-5)
    acc = GaussianAccountant()
    acc.history = [(1.0, 0.1, 300)]
    assert out == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    assert privacy.EPSILON_KEY.match("epsilon_spent") and not privacy.EPSILON_KEY.match("local_steps")


def test_non_members_exclude_what_the_client_trained_on_in_any_round():
    from privbench.app_audit.attacks import held_out

    x = torch.arange(12.0).view(12, 1, 1, 1)
    y = torch.arange(12) % 3
    notes = [{"node": 7, "type": "train", "inputs": x[:4], "labels": y[:4], "held_inputs": x[2:6],
              "held_labels": y[2:6]},  # a validation pass over records 2..5, of which 2 and 3 were trained on
             {"node": 7, "type": "evaluate", "inputs": x[6:9], "labels": y[6:9]},
             {"node": 7, "type": "train", "inputs": x[8:9], "labels": y[8:9]}]  # record 8, trained on later
    got, labels = held_out(AppRun([], notes, partitions={7: 0}), "client0")
    assert got.flatten().tolist() == [4.0, 5.0, 6.0, 7.0] and labels.tolist() == [1, 2, 0, 1]
    notes[0]["capped"] = True  # records trained on past the cap are unknown: no non-members
    assert held_out(AppRun([], notes, partitions={7: 0}), "client0") is None


def test_the_report_shows_each_table_the_problems_and_the_reconstructions():
    from privbench.app_audit.report import markdown, page

    summary = {
        "app": {"name": "demo", "supernodes": 2, "rounds": 1, "seed": 0, "strategy": "FedAvg", "mods": ["LocalDpMod"]},
        "command": "privbench audit-app demo", "notes": [], "problems": ["LocalDpMod: noise scaled for sensitivity"],
        "bytes": {"up train": {"messages": 2, "wire_bytes": 900, "array_bytes": 800}},
        "mechanisms": [{"mechanism": "LocalDpMod", "clip": 1.0, "noise_multiplier_measured": 4.8e-5,
                        "epsilon_claimed": 10.0, "epsilon_measured": 2.4e8, "delta": 1e-5, "covers": "the update"}],
        "uploads": [{"client": "client1", "round": 1, "skipped": [], "membership": {"membership_auc": 0.61},
                     "reconstruction": {"psnr_mean": 21.64, "psnr_chance": 11.8, "recovered_fraction": 1.0}}],
        "gate": [{"rule": "misconfigured", "failed": True, "why": "LocalDpMod: noise scaled"}]}
    md, html = markdown(summary), page(summary)
    assert "- **LocalDpMod: noise scaled for sensitivity**" in md
    assert "| LocalDpMod | 1 | 4.8e-05 | 10 | 2.4e+08 | 1e-05 | the update |" in md
    assert "| client1 | 1 | 0.61 |" in md and "21.6 (11.8), recovered 1" in md
    assert "| misconfigured | FAIL | LocalDpMod: noise scaled |" in md
    assert "<img src='reconstructions/r0001-client1/grid.png'" in html and "class='problem'" in html


def test_the_command_s_help_names_its_rules_and_doc(capsys):
    from privbench.app_audit.command import main

    with pytest.raises(SystemExit) as done:
        main(["--help"])
    text = capsys.readouterr().out
    assert done.value.code == 0 and "docs/audit-app.md" in text
    assert all(word in text for word in ("--fail-on", "psnr_gain", "epsilon-above-claim", "--max-images"))


def test_the_grid_keeps_the_model_each_batch_broadcast_and_says_when_clients_got_different_ones(task_identity):
    grid = RecordingGrid(EchoGrid())
    ones, twos = {"w": np.ones(3, np.float32)}, {"w": np.full(3, 2.0, np.float32)}
    grid.send_and_receive([_message(ones, **{"server-round": 1}), _message(ones, **{"server-round": 1})])
    grid.send_and_receive([_message(twos, MessageType.EVALUATE, **{"server-round": 1})])  # not kept in messages
    grid.send_and_receive([_message(ones, **{"server-round": 2}), _message(twos, **{"server-round": 2})])
    first, evaluate, mixed = grid.models
    assert (first.message_type, first.round, first.same, len(first.message_ids)) == ("train", 1, True, 2)
    assert first.message_ids == [m.message_id for m in grid.messages[:2]]
    assert evaluate.message_type == "evaluate" and torch.equal(evaluate.arrays["w"], torch.full((3,), 2.0))
    assert not next(m for m in grid.messages if m.message_type == "evaluate").arrays
    assert mixed.round == 2 and not mixed.same  # per-client downloads: no one model for the round


def test_a_reply_that_is_not_a_model_is_refused_per_upload_and_a_declared_delta_is_read_as_one():
    from privbench.app_audit.attacks import client_rounds

    torch.manual_seed(0)
    net = torch.nn.Linear(20, 3)
    sent = {k: v.detach().clone() for k, v in net.state_dict().items()}
    torch.optim.SGD(net.parameters(), lr=0.1).zero_grad()
    torch.nn.functional.cross_entropy(net(torch.randn(8, 20)), torch.randint(0, 3, (8,))).backward()
    with torch.no_grad():
        for p in net.parameters():
            p -= 0.1 * p.grad
    trained = {k: v.detach().clone() for k, v in net.state_dict().items()}
    delta = {k: trained[k] - sent[k] for k in sent}
    notes = [{"node": 7, "type": "train", "message_id": "m", "inputs": torch.randn(8, 20),
              "labels": torch.randint(0, 3, (8,))}]

    def run(reply: dict[str, torch.Tensor]) -> AppRun:
        return AppRun([Sent("down", "train", 1, 7, 0, 0, arrays=sent, message_id="m"),
                       Sent("up", "train", 1, 7, 0, 0, arrays=reply, message_id="m")], notes, partitions={7: 0})

    (as_sent,) = client_rounds(run(trained))  # Flower's examples: the trained model, read as it is
    assert as_sent.not_a_model is None and torch.equal(as_sent.payloads(None)[0].tensors["weight"], trained["weight"])
    (guessed,) = client_rounds(run(delta))  # a delta is no model near the one sent: no attack may read it as one
    assert "not a model trained from it" in guessed.not_a_model and "--reply-kind delta" in guessed.not_a_model
    (declared,) = client_rounds(run(delta), "delta")
    assert declared.not_a_model is None
    torch.testing.assert_close(declared.payloads(None)[0].tensors["weight"], trained["weight"], rtol=0, atol=1e-7)
    with pytest.raises(ConfigError, match="--reply-kind gradient"):
        Declared(reply_kind="gradient").check()


def test_what_flwr_run_said_is_its_error_box_s_first_paragraph_in_one_line():
    from privbench.app_audit.deployment import flower_said

    box = ("Migrated SuperLink connections:\n  local (default)\n"
           "╭─ Error ────────╮\n│ Invalid Flower App configuration in '/a/pyproject.toml':  │\n"
           "│ - Unable to find attribute server in module m  │\n│                │\n│ The object reference ... │\n"
           "╰────────────────╯\n")
    assert flower_said(box) == ("Invalid Flower App configuration in '/a/pyproject.toml': - Unable to find "
                                "attribute server in module m")
    assert flower_said("starting\nrun 7 failed: no nodes\n") == "run 7 failed: no nodes"
    assert flower_said("") == "flwr run said nothing"


def test_a_deployment_is_prepared_offline_on_a_copy_with_the_audit_s_commands_first(tmp_path):
    import os

    from privbench.app_audit.deployed import NOTES, SPEC
    from privbench.app_audit.deployment import _prepare

    app = read_app(EXAMPLES / "quickstart-pytorch", engine="deployment")
    env, notes, link = _prepare(app, tmp_path, seed=3, reply_timeout=9.0, canaries=0, records=None)
    assert env["FLWR_DISABLE_UPDATE_CHECK"] == "1" and env["FLWR_TELEMETRY_ENABLED"] == "0"
    assert env["FLWR_HOME"] == str(tmp_path / "flwr") and env[NOTES] == str(notes)
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / "bin")
    assert all(os.access(tmp_path / "bin" / c, os.X_OK) for c in ("flwr-serverapp", "flwr-clientapp"))
    assert (tmp_path / "app" / "pyproject.toml").read_text() == (EXAMPLES / "quickstart-pytorch" / "pyproject.toml").read_text()
    assert f'address = "127.0.0.1:{link}"' in (tmp_path / "flwr" / "config.toml").read_text()
    assert '"seed": 3' in (notes / SPEC).read_text()
