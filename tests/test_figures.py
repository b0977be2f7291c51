"""Every reported figure is specified once (``privbench/figures/``, a module per family) and every output reads the
spec."""
from __future__ import annotations

import ast
from pathlib import Path

from privbench import figures
from privbench.audit.sweep_summary import FIGURES as MULTIRUN_COLUMNS
from privbench.report.collect import FIGURES as REPORT_COLUMNS
from privbench.report.table import LABELS, NON_NEGATIVE, SHOWN, UNIT_RANGE

ROOT = Path(__file__).resolve().parents[1]
KEYS = {f.key for f in figures.FIGURES}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            out.add(id(body[0].value))
    return out


def test_no_module_but_the_spec_spells_a_figure_key():
    spelled = []
    for folder in ("privbench",):
        for path in (ROOT / folder).rglob("*.py"):
            if (ROOT / "privbench" / "figures") in path.parents:
                continue
            tree = ast.parse(path.read_text())
            docs = _docstrings(tree)
            spelled += [f"{path.relative_to(ROOT)}:{n.lineno} {n.value!r}" for n in ast.walk(tree)
                        if isinstance(n, ast.Constant) and n.value in KEYS and id(n) not in docs]
    assert not spelled, spelled


def test_the_spec_is_consistent():
    assert len(KEYS) == len(figures.FIGURES)  # one spec per key
    assert all(f.label and f.section in ("privacy", "utility", "bytes", "defense") for f in figures.FIGURES)
    assert figures.figure("psnr_gain").leak == "higher" and figures.figure("lpips_mean").leak == "lower"
    assert figures.figure("accuracy").leak is None  # utility is not leakage


def test_outputs_are_derived_from_the_spec():
    assert REPORT_COLUMNS == [f.key for f in figures.REPORTED]
    assert SHOWN == [str(f) for f in figures.TABLE]
    assert all(LABELS[f.key] == f.label for f in figures.FIGURES)
    assert UNIT_RANGE == {f.key for f in figures.FIGURES if f.bounds == "unit"} and "accuracy" in UNIT_RANGE
    assert "total_bytes" in NON_NEGATIVE and "psnr_gain" not in NON_NEGATIVE
    assert [c for c, _, _ in MULTIRUN_COLUMNS] == ["psnr_mean", "psnr_gain", "leaks", "personal_accuracy",
                                                   "downloaded_accuracy", "total_bytes",
                                                   "epsilon", "epsilon_accounted", "mia_auc", "mia_tpr_at_fpr_1pct"]


def test_a_figure_reads_its_section():
    metrics = {"privacy": {"psnr_gain": 3.5}, "bytes": {"total_bytes": 10}}
    assert figures.PSNR_GAIN.of(metrics) == 3.5 and figures.TOTAL_BYTES.of(metrics) == 10
    assert figures.ACCURACY.of(metrics) is None
