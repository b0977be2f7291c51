"""docs/attacks.md: one row for every attack option, and each row's command passes the checks made before training."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from privbench.api import preflight
from privbench.overrides import check_overrides, options

DOC = Path(__file__).resolve().parents[1] / "docs" / "attacks.md"
ROW = re.compile(r"^\| `(\w+)` \| `python -m privbench ([^`]*)` \|(.*)$", re.M)


def rows() -> dict[str, str]:
    """Each row's attack option and its command's arguments."""
    found: dict[str, str] = {}
    for attack, args, rest in ROW.findall(DOC.read_text()):
        assert attack not in found, f"two rows for attack {attack}"
        assert len(re.split(r"(?<!\\)\|", rest)) == 3, f"{attack}: a row is attack | command | measures | chance"
        found[attack] = args
    return found


def test_every_attack_option_has_one_row():
    assert sorted(rows()) == options("attack")


@pytest.mark.parametrize("attack", options("attack"))
def test_the_rows_command_passes_the_checks_before_training(attack):
    args = shlex.split(rows()[attack])
    assert f"attack={attack}" in args and not any(a.startswith("-") for a in args)
    check_overrides(args)
    cfg = preflight(args)
    assert cfg.data.source == "fashion_mnist_subset"  # the embedded data: the command runs without a download
