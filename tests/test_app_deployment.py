"""``privbench audit-app`` on a loopback deployment: Flower's own SuperLink and SuperNode processes, ``flwr run``,
the audit's ``flwr-serverapp`` and ``flwr-clientapp`` first on their PATH. What it records and measures must be
what the simulation records and measures for the same app and seed, the app's files must stay as they were
(``flwr run`` rewrites a pyproject.toml that names federations), and a failing app is one line."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
pytestmark = pytest.mark.slow  # each deployment starts a SuperLink, SuperNodes and a process per message: 50-100 s
DEPLOYMENT = '\n[tool.flwr.federations.local-deployment]\naddress = "127.0.0.1:9093"\ninsecure = true\n'


def audit(path: Path, out: Path, *args: str) -> tuple[int, str, str, dict | None]:
    done = subprocess.run([sys.executable, "-m", "privbench", "audit-app", str(path), "--out", str(out), *args],
                          capture_output=True, text=True, timeout=900)
    folders = sorted(out.iterdir()) if out.exists() else []
    summary = json.loads((folders[-1] / "metrics.json").read_text()) if folders else None
    return done.returncode, done.stdout, done.stderr, summary


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def test_an_app_that_asks_for_a_loopback_deployment_is_deployed_and_audited_as_the_simulation_audits_it(tmp_path):
    app = tmp_path / "quickstart"
    shutil.copytree(EXAMPLES / "quickstart-pytorch", app, ignore=shutil.ignore_patterns("__pycache__"))
    pyproject = app / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('default = "local-simulation"', 'default = "local-deployment"')
                         + DEPLOYMENT)
    before = _digest(app)
    code, stdout, stderr, deployed = audit(app, tmp_path / "deployed", "--supernodes", "2")
    assert code == 0 and deployed is not None, stderr[-3000:]
    assert _digest(app) == before  # the app's pyproject.toml and every other file as they were
    assert deployed["app"]["engine"] == "loopback deployment" and "the audit deploys it on this machine" in stdout
    code, _, stderr, simulated = audit(app, tmp_path / "simulated", "--supernodes", "2", "--engine", "simulation")
    assert code == 0 and simulated is not None and simulated["app"]["engine"] == "simulation", stderr[-3000:]
    for key in ("bytes", "uploads", "figures", "mechanisms", "reported_metrics", "aggregates"):
        assert deployed[key] == simulated[key], key
    assert deployed["bytes"]["up train"]["messages"] == 2 * 2  # two SuperNodes, two rounds


def test_canary_clients_and_a_dp_wrapper_are_measured_alike_in_a_deployment(tmp_path):
    """The server's hooks (the canary plan, the DP wrapper found around the strategy) run in Flower's ServerApp
    process; the figures come back equal to the simulation's (node ids are random: float sums agree to 1e-6
    relative)."""
    code, _, stderr, deployed = audit(EXAMPLES / "central-dp", tmp_path / "deployed", "--canaries", "2",
                                      "--engine", "deployment")
    assert code == 0 and deployed is not None, stderr[-3000:]
    code, _, stderr, simulated = audit(EXAMPLES / "central-dp", tmp_path / "simulated", "--canaries", "2")
    assert code == 0 and simulated is not None, stderr[-3000:]
    assert deployed["app"]["strategy"] == simulated["app"]["strategy"] == "DifferentialPrivacyServerSideFixedClipping"
    for key in ("bytes", "uploads", "mechanisms", "aggregates"):
        assert deployed[key] == simulated[key], key
    for key in ("mu", "empirical_epsilon", "canary_shift", "noise_measured", "epsilon_planned"):
        assert deployed["canaries"][key] == pytest.approx(simulated["canaries"][key], rel=1e-6), key
    assert deployed["canaries"]["verdict"].startswith("consistent")


def test_flower_s_own_refusal_and_a_failing_client_app_in_a_deployment_are_one_line_and_no_result(tmp_path):
    app = tmp_path / "broken"
    (app / "broken_app").mkdir(parents=True)
    (app / "pyproject.toml").write_text(
        '[project]\nname = "broken"\nversion = "1.0.0"\n[tool.flwr.app]\npublisher = "me"\n'
        '[tool.flwr.app.components]\nserverapp = "broken_app.main:server"\nclientapp = "broken_app.main:client"\n'
        '[tool.flwr.app.config]\nrounds = 1\n[tool.flwr.federations]\ndefault = "local-deployment"\n' + DEPLOYMENT)
    (app / "broken_app" / "__init__.py").write_text("")
    (app / "broken_app" / "main.py").write_text(
        "import torch\nfrom flwr.app import ArrayRecord\nfrom flwr.clientapp import ClientApp\n"
        "from flwr.serverapp import ServerApp\nfrom flwr.serverapp.strategy import FedAvg\n\n"
        "client, server = ClientApp(), ServerApp()\n\n\n@client.train()\ndef train(msg, context):\n"
        "    raise ValueError('the loader found no data')\n\n\n@server.main()\ndef main(grid, context):\n"
        "    FedAvg(min_available_nodes=2).start(grid=grid, initial_arrays=ArrayRecord(torch.nn.Linear(2, 2)"
        ".state_dict()), num_rounds=1)\n")
    code, _, stderr, summary = audit(app, tmp_path / "out")  # flwr run reads the module: no attribute `server`
    lines = [ln for ln in stderr.splitlines() if ln.startswith("privbench audit-app: error:")]
    assert code == 2 and summary is None and len(lines) == 1, stderr
    assert f"Invalid Flower App configuration in '{app}/pyproject.toml': - Unable to find attribute server" in lines[0]
    main = app / "broken_app" / "main.py"
    main.write_text(main.read_text().replace("client, server = ClientApp(), ServerApp()",
                                             "client = ClientApp()\nserver = ServerApp()"))
    code, _, stderr, summary = audit(app, tmp_path / "out")
    lines = [ln for ln in stderr.splitlines() if ln.startswith("privbench audit-app: error:")]
    assert code == 2 and summary is None
    assert len(lines) == 1 and "the ClientApp on node" in lines[0] and "the loader found no data" in lines[0], stderr
