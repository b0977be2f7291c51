"""Progress: phases are logged (and reach run.log); plain periodic lines off a terminal, bars on one."""
from __future__ import annotations

import logging

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
