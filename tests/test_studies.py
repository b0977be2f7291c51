"""The committed studies live in ``studies/<name>/``, outside the installed package, each a config root on Hydra's
search path: ``experiment=<name>`` composes from there, another folder can be mounted instead, and a study that is
not mounted is refused in one line that says where studies come from."""
from __future__ import annotations

from pathlib import Path

import pytest

from privbench.errors import ConfigError
from privbench.overrides import _composed, check_overrides, compose, options
from privbench.studies import STUDIES_ENV, study_folders

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "studies"
PACKAGE_EXPERIMENTS = ROOT / "privbench" / "conf" / "experiment"


@pytest.fixture
def fresh_compose():
    """Compositions are cached per overrides: each test composes afresh."""
    _composed.cache_clear()
    yield
    _composed.cache_clear()


def test_every_study_with_a_committed_report_is_a_folder_of_studies_and_none_is_in_the_package():
    reports = {d.name for d in (ROOT / "docs" / "studies").iterdir() if d.is_dir()}
    studies = {d.name for d in study_folders()}
    assert studies == {d.name for d in STUDIES.iterdir() if d.is_dir()} and len(studies) >= 18
    assert studies <= reports  # each study's report is committed
    assert not {p.stem for p in PACKAGE_EXPERIMENTS.glob("*.yaml")} & reports  # presets only in the package
    assert not any(p.is_dir() for p in PACKAGE_EXPERIMENTS.iterdir() if p.name != "__pycache__")  # no arms there
    assert studies <= set(options("experiment"))


@pytest.mark.parametrize("study", sorted(d.name for d in STUDIES.iterdir() if d.is_dir()))
def test_each_study_has_a_readme_with_its_command_and_its_arms(study):
    text = (STUDIES / study / "README.md").read_text()
    assert f"experiment={study}" in text and f"docs/studies/{study}/" in text
    arms = STUDIES / study / "experiment" / study
    groups = {p.parent.relative_to(STUDIES / study) for p in arms.rglob("*.yaml")} if arms.is_dir() else set()
    for group in groups:
        options_there = sorted(p.stem for p in (STUDIES / study / group).glob("*.yaml"))
        assert f"`{group}/`: {', '.join(options_there)}" in text


def test_a_study_composes_from_its_folder(fresh_compose):
    cfg = compose(["experiment=loki", "+experiment/loki/attack=imprint", "+experiment/loki=one_step"])
    assert cfg.name == "loki" and cfg.attack._target_.endswith("ImprintAttack") and cfg.data.num_clients == 600


def test_another_folder_of_studies_is_mounted_by_the_variable(tmp_path, monkeypatch, fresh_compose):
    mine = tmp_path / "mine" / "experiment"
    (mine / "mine").mkdir(parents=True)
    (mine / "mine.yaml").write_text("# @package _global_\nname: mine\nfl:\n  rounds: 3\n")
    (mine / "mine" / "long.yaml").write_text("# @package _global_\nfl:\n  rounds: 7\n")
    monkeypatch.setenv(STUDIES_ENV, str(tmp_path))
    assert [d.name for d in study_folders()] == ["mine"]
    assert compose(["experiment=mine"]).fl.rounds == 3
    assert compose(["experiment=mine", "+experiment/mine=long"]).fl.rounds == 7
    with pytest.raises(ConfigError, match=rf"experiment=loki: unknown option \(studies are mounted from {tmp_path}\)"):
        check_overrides(["experiment=loki"])  # the clone's studies are not mounted beside another folder


def test_without_studies_a_study_is_refused_in_one_line_that_says_where_they_come_from(tmp_path, monkeypatch,
                                                                                        fresh_compose):
    monkeypatch.setenv(STUDIES_ENV, str(tmp_path / "absent"))
    assert study_folders() == [] and "loki" not in options("experiment") and "dlg_paper" in options("experiment")
    with pytest.raises(ConfigError) as refused:
        check_overrides(["experiment=loki"])
    line = str(refused.value)
    assert "\n" not in line and f"${STUDIES_ENV}={tmp_path / 'absent'} is not a folder" in line


def test_a_target_named_by_a_study_arm_is_a_config_files_target(tmp_path, monkeypatch, fresh_compose):
    """An arm chosen on the command line (``+experiment/mine/arm=odd``) is a config file: the targets it names are
    trusted as the package's are, not refused as typed on the command line."""
    arms = tmp_path / "mine" / "experiment" / "mine" / "arm"
    arms.mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "mine.yaml").write_text("# @package _global_\nname: mine\n")
    (arms / "odd.yaml").write_text("# @package _global_\nvictim:\n  clients: {_target_: privbench.victim.Victim}\n")
    monkeypatch.setenv(STUDIES_ENV, str(tmp_path))
    check_overrides(["experiment=mine", "+experiment/mine/arm=odd"])
    with pytest.raises(ConfigError, match="a _target_ given on the command line"):
        check_overrides(["experiment=mine", "victim.clients={_target_:privbench.victim.Victim}"])


def test_one_config_source_serves_every_study(tmp_path):
    from hydra.core.object_type import ObjectType

    from privbench.studies import StudiesConfigSource

    for name in ("alpha", "beta"):
        (tmp_path / name / "experiment" / name / "arm").mkdir(parents=True)
        (tmp_path / name / "experiment" / f"{name}.yaml").write_text(f"# @package _global_\nname: {name}\n")
        (tmp_path / name / "experiment" / name / "arm" / "x.yaml").write_text("seed: 3\n")
    (tmp_path / "notes").mkdir()  # not a study: no experiment/notes.yaml
    source = StudiesConfigSource("privbench-studies", f"privbench-studies://{tmp_path}")
    assert source.list("", None) == ["experiment"]
    assert source.list("experiment", ObjectType.CONFIG) == ["alpha", "beta"]
    assert source.list("experiment/alpha", ObjectType.GROUP) == ["arm"]
    assert source.list("experiment/beta/arm", None) == ["x"]
    assert source.is_config("experiment/alpha") and not source.is_config("attack/idlg")
    assert not source.is_config("experiment/notes") and not source.is_group("model")
    loaded = source.load_config("experiment/beta")
    assert loaded.config.name == "beta" and loaded.header["package"] == "_global_"
