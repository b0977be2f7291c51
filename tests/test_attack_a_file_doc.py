"""docs/attack-a-file.md's own client: the script and the attack command run as written, and the doc states LeNet's signature."""
from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from privbench.models import LeNet

DOC = Path(__file__).resolve().parents[1] / "docs" / "attack-a-file.md"


def _blocks(language: str) -> list[str]:
    """The ``<!-- example: run -->`` blocks of ``language`` in the doc, in order."""
    return re.findall(rf"<!-- example: run -->\n```{language}\n(.*?)\n```", DOC.read_text(), re.S)


def _script() -> str:
    (script,) = [b for b in _blocks("python") if "torch.save" in b]
    return script


def _command() -> str:
    (command,) = [b for b in _blocks("bash") if "python -m privbench.attack gradient.pt" in b]
    return command


def test_the_doc_gives_the_client_and_the_command_it_needs():
    script, command = _script(), _command()
    assert "from privbench.models import LeNet" in script and "LeNet(in_channels=1, image_size=28, num_classes=10)" in script
    for saved in ("start.pt", "gradient.pt", "truth.pt"):
        assert f'"{saved}"' in script and saved in command
    n = re.search(r"train\.images\[:(\d+)\]", script)
    assert n and f"--batch-size {n[1]}" in command and "--kind gradient" in command
    assert "model=lenet" in command and "attack=idlg" in command


def test_the_doc_states_lenets_signature():
    params = [f"{p.name}: {p.annotation}" + ("" if p.default is p.empty else f" = {p.default}")
              for p in inspect.signature(LeNet).parameters.values()]
    stated = " ".join(DOC.read_text().split())  # the doc may wrap it
    assert f"privbench.models.LeNet(*, {', '.join(params)})" in stated


@pytest.mark.slow  # the attack: 4 restarts of iDLG, about 30 s of compute (50 s beside another job)
def test_the_docs_client_and_command_run_as_written(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    (tmp_path / "client.py").write_text(_script() + "\n")
    made = subprocess.run([sys.executable, "client.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", _command()], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    leakage = re.search(r"^leakage +PSNR ([\d.]+) dB, chance ([\d.]+), gain ([+-][\d.]+) dB", done.stdout, re.M)
    assert leakage, done.stdout
    results = re.search(r"^results: (.+)$", done.stdout, re.M)
    assert results, done.stdout
    metrics = json.loads((tmp_path / results[1].strip() / "metrics.json").read_text())
    assert metrics["privacy"]["psnr_gain"] > 15  # the image is rebuilt (+32.7 dB on 2026-12-04, seed 0)
