"""CSV files privbench writes open in a spreadsheet as text, never as formulas, and read back unchanged."""
from __future__ import annotations

import csv

import pandas as pd

from privbench.audit.output import write_metrics
from privbench.csv_cells import FORMULA_STARTS, from_cell, to_cell
from privbench.report.__main__ import spreadsheet_safe
from privbench.report.collect import runs_from_csv

HOSTILE = ["=HYPERLINK(\"http://x\",\"y\")", "+cmd|' /C calc'!A0", "-2+3", "@SUM(1)", "\t=1", "\r=1", "'quoted"]


def _opens_as_formula(cell: str) -> bool:
    """What a spreadsheet does with a text cell: a leading formula character starts a formula, unless it is a
    plain number."""
    try:
        float(cell)
        return False
    except ValueError:
        return cell.startswith(FORMULA_STARTS)


def test_hostile_cells_are_quoted_numbers_are_not_and_both_read_back():
    for value in HOSTILE:
        assert not _opens_as_formula(to_cell(value)) and from_cell(to_cell(value)) == value
    for number in ("-1.5", "-inf", "+3", "-1e-05", "-"):
        assert to_cell(number) == number


def test_metrics_csv_quotes_a_hostile_name_and_value(tmp_path):
    write_metrics(tmp_path, {"run": {"name": "=1+1"}, "privacy": {"=evil": "@SUM(A1)", "psnr_mean": -3.5}})
    with open(tmp_path / "metrics.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    cells = rows[0] + rows[1]
    assert not any(_opens_as_formula(c) for c in cells), cells
    assert "-3.5" in rows[1]


def test_a_report_s_runs_csv_round_trips_hostile_cells(tmp_path):
    frame = pd.DataFrame({"seed": [0, 1], "fl": ["fedavg", "genefl"], "run_dir": ["+experiment/x=a,seed=0", "plain"], "=name": HOSTILE[:2],
                          "psnr_gain": [-1.25, 3.0]})
    (tmp_path / "runs.csv").write_text(spreadsheet_safe(frame).to_csv(index=False))
    with open(tmp_path / "runs.csv", newline="") as handle:
        assert not any(_opens_as_formula(c) for row in csv.reader(handle) for c in row)
    back = runs_from_csv(tmp_path / "runs.csv")
    assert list(back["run_dir"]) == list(frame["run_dir"]) and list(back["=name"]) == HOSTILE[:2]
    assert list(back["psnr_gain"]) == [-1.25, 3.0]
