"""Progress: phases are logged (and reach run.log); plain periodic lines off a terminal, bars on one."""
from __future__ import annotations

import logging
import os

from privbench import progress


def test_off_a_terminal_each_phase_logs_start_periodic_lines_and_end(monkeypatch, caplog, tmp_path):
    monkeypatch.setattr(progress, "on_terminal", lambda: False)
    monkeypatch.setattr(progress, "PERIOD", 0.0)
    with caplog.at_level(logging.INFO, logger="privbench"), progress.run_log(tmp_path):
        with progress.phase("idlg attack, restart 2/4", total=3, unit="it") as bar:
            for v in (3.0, 2.0, 1.0):
                bar.update(1, objective=v)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "idlg attack, restart 2/4: started"
    assert "idlg attack, restart 2/4: 2/3 it" in lines[2] and "left, objective 2" in lines[2]
    assert lines[-1].startswith("idlg attack, restart 2/4: done in") and lines[-1].endswith("objective 1")
    written = (tmp_path / "run.log").read_text()
    assert "restart 2/4: started" in written and "restart 2/4: done in" in written


def test_on_a_terminal_a_named_bar_per_phase_under_the_audit_bar(monkeypatch, capsys):
    monkeypatch.setattr(progress, "on_terminal", lambda: True)
    progress.OVERALL.plan(2)
    with progress.phase("genefl training", total=2, unit="round") as bar:
        bar.update(1)
        bar.update(1)
    with progress.phase("scoring", total=1):
        pass
    progress.OVERALL.close()
    err = capsys.readouterr().err
    assert "genefl training" in err and "round" in err and "audit 0/2 phases" in err and "phases" in err


def test_lira_s_shadow_training_speaks_off_a_terminal(monkeypatch, caplog):
    """The smallest real LiRA: a linear model, 6 candidates, 4 shadows of 2 epochs; each shadow step and scoring batch
    is a plain progress line when stderr is no terminal (PERIOD 0: a line per step)."""
    import torch
    from torch import nn

    from privbench.attacks.membership.lira import LiRA
    from privbench.attacks.membership.views import MembershipView
    from privbench.payloads import LocalTraining

    monkeypatch.setattr(progress, "on_terminal", lambda: False)
    monkeypatch.setattr(progress, "PERIOD", 0.0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    x, y = torch.randn(12, 1, 2, 2), torch.arange(12) % 3
    training = LocalTraining(lr=0.1, steps=4, batch_size=2, num_samples=3, epochs=2)  # 2 epochs of 2 batches
    view = MembershipView(model=model, base=base, weights={n: t + 0.01 for n, t in base.items()}, gradient={},
                          candidates=x[:6], labels=y[:6], training=training, population=x[6:],
                          population_labels=y[6:])
    with caplog.at_level(logging.INFO, logger="privbench"):
        scores = LiRA(shadows=4, batch_size=4).attack(view, seed=0)
    lines = [r.getMessage() for r in caplog.records]
    assert len(scores.scores) == 6
    name = "shadow training (4 shadows at once)"
    assert lines[0] == f"{name}: started"
    steps = [line for line in lines if line.startswith(f"{name}: ") and " step, " in line]
    assert [s.split(" step")[0] for s in steps] == [f"{name}: {k}/4" for k in (1, 2, 3, 4)], lines
    assert any(line.startswith(f"{name}: done in") for line in lines)
    assert any(line.startswith("lira: candidates under 4 shadows: 2/2 batch") for line in lines), lines


def test_a_phase_inside_another_is_drawn_below_it_and_not_counted_by_the_audit_bar(monkeypatch):
    monkeypatch.setattr(progress, "on_terminal", lambda: False)
    finished = []
    monkeypatch.setattr(progress.OVERALL, "finished", lambda: finished.append(1))
    with progress.phase("outer", total=1) as outer:
        with progress.phase("inner", total=2) as inner:
            assert (outer.depth, inner.depth) == (0, 1)
    assert finished == [1] and not progress._OPEN


def test_the_console_shows_privbench_s_lines_and_others_warnings_but_not_their_chatter():
    def record(name: str, level: int, message: str) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, message, None, None)

    shown = progress.OwnLines()
    assert shown.filter(record("privbench", logging.INFO, "data: started"))
    assert shown.filter(record("privbench.attacks", logging.DEBUG, "x"))
    assert not shown.filter(record("flwr", logging.INFO, "Starting Flower ServerApp"))
    assert not shown.filter(record("hydra.launcher", logging.INFO, "#0 : seed=0"))
    assert shown.filter(record("torch", logging.WARNING, "a real warning"))
    assert not shown.filter(record("flwr", logging.WARNING, "DEPRECATED FEATURE: `start_client`"))
    assert not shown.filter(record("py.warnings", logging.WARNING, "x.py:3: DeprecationWarning: old\n  f()"))
    assert not shown.filter(record("py.warnings", logging.WARNING, "x.py:3: FutureWarning: soon\n  f()"))
    assert shown.filter(record("py.warnings", logging.WARNING, "x.py:3: UserWarning: look\n  f()"))


def test_quiet_consoles_detaches_a_library_s_own_console_handler_and_puts_it_back():
    logger = logging.getLogger("flwr-test-chatter")
    handler, kept = logging.StreamHandler(), logging.FileHandler(os.devnull)
    logger.addHandler(handler)
    logger.addHandler(kept)
    logger.propagate = False
    try:
        with progress.quiet_consoles(("flwr-test-chatter", "never-imported-library")):
            assert logger.handlers == [kept] and logger.propagate
        assert handler in logger.handlers and not logger.propagate
        assert "never-imported-library" not in logging.root.manager.loggerDict
    finally:
        logger.removeHandler(handler)
        logger.removeHandler(kept)
        kept.close()
