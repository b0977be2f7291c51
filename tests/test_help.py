"""``python -m privbench --help``: its example commands compose and plan as written, its lists are the config groups'."""
from __future__ import annotations

import copy
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from privbench.api import preflight
from privbench.overrides import GROUPS, check_overrides, options

ROOT = Path(__file__).resolve().parents[1]
COMMAND = re.compile(r"python -m privbench(?![.\w])([^#)\n]*)")


def _render() -> str:
    """The help text as ``python -m privbench --help`` prints it, rendered by Hydra in this process."""
    from hydra import initialize_config_module
    from hydra._internal.utils import get_args_parser
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from privbench.naming import register
    from privbench.studies import register_studies

    register()
    register_studies()  # as the CLI does before Hydra starts
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="privbench.conf", version_base="1.3"):
            hydra = GlobalHydra.instance().hydra
            assert hydra is not None
            cfg = hydra.compose_config(config_name="config", overrides=[], run_mode=RunMode.RUN)
            HydraConfig.instance().set_config(cfg)
            clean = hydra.get_sanitized_cfg(copy.deepcopy(cfg), "job")
            return hydra.get_help(cfg.hydra.help, clean, get_args_parser(), resolve=False)
    finally:
        GlobalHydra.instance().clear()


@pytest.fixture(scope="module")
def help_text() -> str:
    return _render()


def _commands(text: str) -> list[list[str]]:
    """Every ``python -m privbench ...`` of ``text`` (not ``privbench.report`` or ``.attack``) as its arguments."""
    return [m[1].split() for m in COMMAND.finditer(text)]


def _jobs(args: list[str]) -> list[list[str]]:
    """The overrides of each job ``args`` start: a sweep (``-m``, ``key=a,b``) gives one job per combination."""
    args = [a for a in args if a not in ("--help", "-m", "--multirun")]
    values = [[f"{a.split('=', 1)[0]}={v}" for v in a.split("=", 1)[1].split(",")] if "=" in a and "[" not in a
              else [a] for a in args]
    return [list(job) for job in itertools.product(*values)]


def test_the_help_lists_every_option_of_every_group(help_text):
    for group in GROUPS:
        assert f"{group}: {', '.join(options(group))}\n" in help_text, group
    assert all(f" {attack}," in help_text or f" {attack}\n" in help_text
               for attack in (p.stem for p in (ROOT / "privbench" / "conf" / "attack").glob("*.yaml")))


def test_the_footer_names_every_group_and_only_real_options(help_text):
    footer = help_text[help_text.index("\nExamples:"):]
    groups = footer[footer.index("Groups"):footer.index("Keys:")]
    assert [g for g in GROUPS if not re.search(rf"\b{g}\b", groups)] == []
    named = re.findall(r"\b(" + "|".join(GROUPS) + r")=([\w,]+)", help_text)
    assert named and [(g, o) for g, v in named for o in v.split(",") if o not in options(g)] == []
    for group, listed in re.findall(r"\b(" + "|".join(GROUPS) + r") \(([^)]*)\)", footer):  # a list of options is all of them
        words = set(re.findall(r"\w+", listed))
        assert not words & set(options(group)) or words >= set(options(group)), f"{group} ({listed}): stale"


def test_the_help_has_its_examples(help_text):
    commands = _commands(help_text)
    assert len(commands) >= 5 and [] in commands and any("-m" in c for c in commands)


@pytest.mark.parametrize("args", _commands((ROOT / "privbench" / "conf" / "hydra" / "help" / "privbench.yaml").read_text()),
                         ids=" ".join)
def test_each_example_of_the_help_composes_and_plans(args):
    check_overrides([a for a in args if a not in ("--help", "-m", "--multirun")])
    for job in _jobs(args):
        preflight(job)


@pytest.mark.slow  # one process, about 5 s (10 s beside another job)
def test_the_cli_prints_that_help(tmp_path):
    out = subprocess.run([sys.executable, "-m", "privbench", "--help"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    assert out.returncode == 0, out.stderr
    assert f"attack: {', '.join(options('attack'))}\n" in out.stdout
    assert _commands(out.stdout) == _commands(_render())
