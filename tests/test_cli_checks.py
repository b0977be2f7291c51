"""``python -m privbench`` in this process: --help and --hydra-help checked like a run, --config-dir composed by the
checks as Hydra adds it, and a refused rerun never writing into (or removing from) a finished run's folder."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from privbench.config_dir import use_config_dir
from privbench.errors import AttackNotApplicableError, ConfigError
from privbench.launch import hydra_arguments
from privbench.overrides import check_overrides

EXAMPLE_CONF = Path(__file__).resolve().parents[1] / "examples" / "own_model_and_data" / "conf"
#: A two-client FedAvg round without an attack (as in test_console).
TINY = ["fl=fedavg", "attack=none", "fl.rounds=1", "data.num_clients=2", "fl.participants=2", "fl.local_epochs=1",
        "data.partition=iid", "metrics.lpips=false"]


@pytest.fixture
def main(cli_here):
    """``python -m privbench ARGS`` here, in ``tmp_path``; its exit status (conftest's ``cli_here``)."""
    return cli_here


@pytest.mark.parametrize("flag", ["--help", "--hydra-help"])
def test_help_with_a_logging_override_is_refused_in_one_line_and_writes_nothing(main, tmp_path, capfd, flag):
    target = tmp_path / "x" / "pwned.log"
    code = main(flag, "hydra.hydra_logging.handlers.console.class=logging.FileHandler",
                "~hydra.hydra_logging.handlers.console.stream",
                f"+hydra.hydra_logging.handlers.console.filename={target}")
    err = capfd.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("privbench: error: hydra.hydra_logging"), err
    assert not target.exists() and not (tmp_path / "x").exists()
    assert main(flag, "hydra/hydra_logging=default") == 2  # a hydra_logging choice off the allow-list: refused too
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["--help"], ["attack=ig", "--help"]])
@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_help_still_prints_the_help(main, capfd, args):
    assert main(*args) == 0
    out = capfd.readouterr().out
    assert "attack: " in out and "privbench" in out


def test_an_option_of_the_config_dir_composes_and_is_checked():
    with pytest.raises(ConfigError, match="model=tiny_cnn: unknown option"):
        check_overrides(["model=tiny_cnn"])  # not without the folder
    try:
        args = hydra_arguments(["--config-dir", str(EXAMPLE_CONF), "model=tiny_cnn", "data=shapes"])
        use_config_dir(args.config_dir)
        check_overrides(list(args.overrides))
        with pytest.raises(ConfigError, match="model._target_='builtins.exec': a _target_ given on the command line"):
            check_overrides(["model=tiny_cnn", "model._target_=builtins.exec"])
        with pytest.raises(ConfigError, match="hydra.job_logging"):
            check_overrides(["model=tiny_cnn", "hydra.job_logging.root.level=INFO"])
        with pytest.raises(ConfigError, match="model=tiny_cnm: unknown option .did you mean model=tiny_cnn"):
            check_overrides(["model=tiny_cnm"])
    finally:
        use_config_dir(None)
    with pytest.raises(ConfigError, match="--config-dir nowhere: no such folder"):
        use_config_dir("nowhere")


def test_the_cli_takes_a_config_dir(main, tmp_path, capfd):
    assert main("--config-dir", str(EXAMPLE_CONF), "model=tiny_cnn", "data=shapes", "--cfg", "job") == 0
    assert "_target_: shapes.tiny_cnn" in capfd.readouterr().out
    assert main("--config-dir", str(EXAMPLE_CONF), "model=tiny_cnn", "model._target_=builtins.exec") == 2
    assert "privbench: error: model._target_='builtins.exec'" in capfd.readouterr().err
    assert not (tmp_path / "results").exists()


def _finished(folder: Path, overrides: list[str]) -> dict[str, bytes]:
    """A finished run of ``overrides`` in ``folder``; its files (but Hydra's) with their bytes."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"run": {"overrides": overrides, "config_key": "earlier"}}))
    (folder / "comm.json").write_text("{}\n")
    (folder / "run.log").write_text("the finished run's log\n")
    return _files(folder)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and p.parent.name != ".hydra" and p.name != "run.log"}


@pytest.mark.parametrize("where", ["plan", "claimed"])
def test_a_refused_rerun_leaves_a_finished_run_s_folder_as_it_was(main, tmp_path, monkeypatch, capfd, where):
    import privbench.audit.run as run

    def refuse(*args: object, **kwargs: object) -> None:
        raise AttackNotApplicableError("attack=none cannot read this payload")

    monkeypatch.setattr(run, "plan", refuse) if where == "plan" else monkeypatch.setattr(run.Wire, "for_protocol",
                                                                                          refuse)
    task = [*TINY, "resume=false", f"results_dir={tmp_path / 'results'}"]
    done = tmp_path / "results" / "done"
    before = _finished(done, task)
    assert main(*task, f"hydra.run.dir={done}") == 2
    assert "privbench: error: attack=none cannot read this payload" in capfd.readouterr().err
    assert _files(done) == before and (done / "run.log").exists() and (done / ".hydra").is_dir()
    claimed = done.with_name("done-2")
    if where == "claimed":  # the rerun's own folder says why
        assert (claimed / "error.txt").read_text() == "privbench: error: attack=none cannot read this payload\n"
    else:
        assert not claimed.exists()
