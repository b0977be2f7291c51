"""docs/running.md's own-model-and-data command runs as written, from the repository's root on a fresh copy."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "running.md"


def _line() -> str:
    """The documented command: the one line of a bash block that runs the audit on the example's model and data."""
    lines = [line for block in re.findall(r"```bash\n(.*?)\n```", DOC.read_text(), re.S) for line in block.splitlines()
             if "model=tiny_cnn" in line and "python -m privbench " in line]
    assert len(lines) == 1, lines
    return lines[0]


def test_the_documented_line_names_what_it_needs():
    line = _line()
    folder = re.match(r"cd (\S+) && python -m privbench ", line)
    assert folder and (ROOT / folder[1] / "shapes.py").is_file()  # run where the configs' `shapes.` module imports
    search = re.search(r"hydra\.searchpath=\[file://(\S+)\]", line)
    assert search and (ROOT / folder[1] / search[1] / "model" / "tiny_cnn.yaml").is_file()
    assert "fl=fedavg" in line and "payload=gradient" in line


@pytest.mark.slow  # trains FedAvg's 10 rounds and attacks: about 13 s (25 s beside another job)
def test_the_documented_line_runs_from_the_repository_root(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns("results", "__pycache__", "outputs"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", "HYDRA_FULL_ERROR": "0"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", _line()], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert re.search(r"^leakage +PSNR", done.stdout, re.M), done.stdout
    (metrics,) = (tmp_path / "examples" / "own_model_and_data" / "results").rglob("metrics.json")
    run = json.loads(metrics.read_text())["run"]
    assert (run["model"], run["data"]) == ("tiny_cnn", "shapes")
