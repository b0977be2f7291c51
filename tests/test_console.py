"""``python -m privbench`` run in this process (Hydra's logging included): what the console shows, what run.log
keeps, what a refused run leaves behind, and a sweep's job lines."""
from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest

from privbench.errors import AttackNotApplicableError

#: A two-client FedAvg round without an attack: about a second of training.
TINY = ["fl=fedavg", "attack=none", "fl.rounds=1", "data.num_clients=2", "fl.participants=2", "fl.local_epochs=1",
        "data.partition=iid", "metrics.lpips=false"]


@pytest.fixture
def app(cli_here, monkeypatch, tmp_path):
    """Run ``python -m privbench ARGS`` here (results under ``tmp_path``); logging and Hydra's state put back after."""
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    return lambda *args: cli_here(*args, f"results_dir={tmp_path / 'results'}")


def _runs(tmp_path: Path) -> list[Path]:
    return sorted(p for p in (tmp_path / "results").rglob("*") if p.is_dir() and (p / ".hydra").is_dir())


def test_a_run_refused_while_planning_leaves_no_folder(app, tmp_path, capfd):
    assert app("fl=fedavg", "payload=update", "attack=lira", "defense=dpsgd") == 2
    err = capfd.readouterr().err
    assert "privbench: error: attack=lira with defense=dpsgd" in err
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


def test_a_run_refused_once_it_wrote_files_keeps_them_with_error_txt(app, tmp_path, monkeypatch, capfd):
    import privbench.audit.run as run

    def refuse(*args, **kwargs):  # once the run's folder holds config.yaml, before training
        raise AttackNotApplicableError("attack=none cannot read this payload")

    monkeypatch.setattr(run.Wire, "for_protocol", refuse)
    assert app(*TINY) == 2
    [folder] = _runs(tmp_path)
    assert (folder / "config.yaml").exists() and not (folder / "metrics.json").exists()
    assert (folder / "error.txt").read_text() == "privbench: error: attack=none cannot read this payload\n"
    assert "privbench: error: attack=none cannot read this payload" in capfd.readouterr().err


def test_a_refusal_in_a_folder_holding_more_than_hydra_s_files_is_written_there(app, tmp_path, monkeypatch):
    from hydra.core.hydra_config import HydraConfig

    import privbench.audit.run as run
    from privbench.errors import ConfigError

    def refuse(cfg):
        (Path(HydraConfig.get().runtime.output_dir) / "notes.txt").write_text("the user's\n")
        raise ConfigError("fl.lr=-1: must be a number > 0")

    monkeypatch.setattr(run, "plan", refuse)
    assert app(*TINY) == 2
    [folder] = _runs(tmp_path)
    assert (folder / "notes.txt").read_text() == "the user's\n"
    assert (folder / "error.txt").read_text() == "privbench: error: fl.lr=-1: must be a number > 0\n"


def test_the_console_shows_privbench_s_lines_and_run_log_keeps_third_party_chatter(app, tmp_path, monkeypatch, capfd):
    """Flower's INFO lines (through its own console handler when Flower is imported), its deprecation notices and a
    Python DeprecationWarning stay off the console and reach run.log; another library's warning is shown."""
    import privbench.audit.run as run

    flower = logging.getLogger("flwr")
    try:
        with warnings.catch_warnings():  # Flower's imports warn of their own dependencies' deprecations
            warnings.simplefilter("ignore")
            from flwr.common.logger import warn_deprecated_feature  # Flower's own console handler on "flwr"
    except ImportError:
        warn_deprecated_feature = None
    set_threads = run._set_threads

    def chatter(*args, **kwargs):
        set_threads(*args, **kwargs)
        flower.info("Plugin chatter: loaded 3 plugins")
        if warn_deprecated_feature is not None:
            warn_deprecated_feature("`chatter_api`")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("old_api() is deprecated", DeprecationWarning)
        logging.getLogger("somelib").warning("somelib: a real problem")

    monkeypatch.setattr(run, "_set_threads", chatter)
    assert app(*TINY) == 0
    out, err = capfd.readouterr()
    console = out + err
    assert "fedavg training: started" in out and "results: " in out
    assert "somelib: a real problem" in console
    for chat in ("Plugin chatter", "old_api() is deprecated", "chatter_api", "DEPRECATED FEATURE"):
        assert chat not in console, console
    [folder] = _runs(tmp_path)
    log = (folder / "run.log").read_text()
    assert "[flwr][INFO] Plugin chatter: loaded 3 plugins" in log
    assert "[py.warnings][WARNING]" in log and "DeprecationWarning: old_api() is deprecated" in log
    assert "fedavg training: started" in log and "somelib: a real problem" in log
    if warn_deprecated_feature is not None:
        assert "DEPRECATED FEATURE: `chatter_api`" in log
        assert any(type(h).__name__ == "ConsoleHandler" for h in flower.handlers)  # Flower's own, put back


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_each_job_of_a_sweep_says_which_of_how_many(app, tmp_path, capfd):
    assert app("-m", *TINY, "seed=0,1") == 0
    out = capfd.readouterr().out
    assert "job 1/2: " in out and "job 2/2: " in out and "seed=1" in out.split("job 2/2: ")[1].splitlines()[0]
    assert "Launching 2 jobs" not in out  # Hydra's own INFO lines stay off the console
