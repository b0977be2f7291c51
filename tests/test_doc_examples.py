"""Every shell and Python block of the README and docs/ runs, so an example cannot rot.

Each fenced ``bash`` or ``python`` block carries a directive on the line above it:

- ``<!-- example: run -->``: run as written;
- ``<!-- example: cheap -->``: run with ``CHEAP`` settings added to each ``python -m privbench`` command and
  each ``privbench.run``/``privbench.compose`` call (only those a command's config has keys for);
  ``; files: A B`` makes the files the block names as its user's own (a LeNet gradient, its weights and
  the image it came from);
- ``<!-- example: skip: REASON -->``: not run here; REASON names the test that covers it or what it needs.

A block's commands run in one folder per document (so a sweep's report finds the sweep), with the
repository's ``examples/`` and ``deploy/`` linked in and ``.venv``'s Python on the ``PATH``.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: Settings that make an audit take seconds; each is added only where the command's config has its key.
CHEAP = ["fl.rounds=4", "fl.participants=2", "fl.local_epochs=1", "attack.iterations=10", "attack.restarts=1",
         "metrics.lpips=false", "fl.agnostic.fedavg_reference=false", "defense.target_epsilon=8"]
FENCE = re.compile(r"^```(bash|python)\s*$")
DIRECTIVE = re.compile(r"^<!-- example: (run|cheap|skip)(.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    language: str
    code: str
    directive: str  # run | cheap | skip
    detail: str

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        i = 0
        while i < len(lines):
            match = FENCE.match(lines[i])
            if not match:
                i += 1
                continue
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            directive = DIRECTIVE.match(lines[i - 1].strip()) if i else None
            found.append(Block(doc, i + 1, match[1], "\n".join(lines[i + 1:end]),
                               directive[1] if directive else "", (directive[2] if directive else "").strip()))
            i = end + 1
    return found


BLOCKS = blocks()


def test_every_block_says_whether_it_runs():
    assert len(BLOCKS) >= 15
    missing = [b.name for b in BLOCKS if not b.directive]
    assert not missing, f"a block without an <!-- example: run|cheap|skip: ... --> line above it: {missing}"
    for b in BLOCKS:
        if b.directive == "skip":
            reason = b.detail.lstrip(":").strip()
            assert re.search(r"tests/\w+\.py|\.ci/run|needs ", reason), f"{b.name}: say what covers it: {reason!r}"
    assert sum(b.directive != "skip" for b in BLOCKS) >= 6


def _applicable(args: list[str]) -> list[str]:
    """The CHEAP settings ``python -m privbench ARGS`` has keys for."""
    from privbench.errors import ConfigError
    from privbench.overrides import check_overrides

    keep = []
    for extra in CHEAP:
        key = extra.split("=", 1)[0]
        if any(a.split("=", 1)[0].lstrip("+~") == key for a in args):
            continue  # the example sets it itself
        try:
            check_overrides([*args, extra])
        except ConfigError:
            continue
        keep.append(extra)
    return keep


def _cheap_shell(code: str) -> str:
    out = []
    for line in code.splitlines():
        match = re.match(r"^(\s*(?:\w+=\S+ )*python -m privbench)( [^#&]*?)?(\s*(?:&&.*|#.*)?)$", line)
        if match and not line.strip().startswith("#"):
            args = [a for a in (match[2] or "").split() if "=" in a and not a.startswith("-")]
            line = f"{match[1]}{match[2] or ''} {' '.join(_applicable(args))}{match[3]}"
        out.append(line)
    return "\n".join(out)


def _cheap_python(code: str) -> str:
    """``code`` with each ``privbench.run([...])``/``privbench.compose([...])`` list given the CHEAP settings it has keys for."""
    import ast

    def cheaper(match: re.Match[str]) -> str:
        args = ast.literal_eval(f"[{match[2]}]")
        return f"privbench.{match[1]}([{', '.join(repr(a) for a in [*args, *_applicable(args)])}]"
    return re.sub(r"privbench\.(run|compose)\(\[([^\]]*)\]", cheaper, code)


def _user_files(folder: Path) -> None:
    """grads.pt, weights.pt, truth.pt as a user of plain PyTorch saves them: one LeNet gradient of one image."""
    import torch
    import torch.nn.functional as F

    from privbench.data.embedded import load_fashion_mnist_subset
    from privbench.models import LeNet

    train = load_fashion_mnist_subset(train=True)
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    image = train.images[:1].float() / 255
    normalised = (image - torch.tensor(train.mean).view(1, -1, 1, 1)) / torch.tensor(train.std).view(1, -1, 1, 1)
    F.cross_entropy(model(normalised), train.labels[:1]).backward()
    torch.save({n: p.grad for n, p in model.named_parameters()}, folder / "grads.pt")
    torch.save(model.state_dict(), folder / "weights.pt")
    torch.save({"images": image, "labels": train.labels[:1]}, folder / "truth.pt")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):  # type: ignore[no-untyped-def]
    made: dict[Path, Path] = {}

    def folder(doc: Path) -> Path:
        if doc not in made:
            made[doc] = tmp_path_factory.mktemp(doc.stem.lower())
            for link in ("examples", "deploy"):
                (made[doc] / link).symlink_to(ROOT / link)
        return made[doc]
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.directive in ("run", "cheap")], ids=lambda b: b.name)
def test_the_example_runs(block, folders):  # type: ignore[no-untyped-def]
    cwd = folders(block.doc)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "OMP_NUM_THREADS": "1", "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "MPLBACKEND": "Agg"}
    files = re.search(r"files: ([\w. ]+)", block.detail)
    if files:
        _user_files(cwd)
        assert all((cwd / f).is_file() for f in files[1].split())
    if block.language == "python":
        code = _cheap_python(block.code) if block.directive == "cheap" else block.code
        command = [sys.executable, "-c", code]
    else:
        code = _cheap_shell(block.code) if block.directive == "cheap" else block.code
        code = code.replace(". .venv/bin/activate", ":")  # the test's Python is .venv's already
        code = code.replace("results/multirun/<timestamp>", '"results/multirun/$(ls results/multirun | tail -1)"')
        command = ["bash", "-euo", "pipefail", "-c", code]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"{block.name}:\n{code}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
