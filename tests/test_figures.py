"""Every reported figure is specified once (``privbench/figures/``, a module per family) and every output reads the
spec."""
from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pytest

from privbench import figures
from privbench.audit.summary import summary
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
    assert [str(c) for c, _ in MULTIRUN_COLUMNS] == ["psnr_mean", "psnr_gain", "leaks", "personal_accuracy",
                                                   "downloaded_accuracy", "total_bytes",
                                                   "epsilon", "epsilon_accounted", "mia_auc", "mia_tpr_at_fpr_1pct"]


def test_a_figure_reads_its_section():
    metrics = {"privacy": {"psnr_gain": 3.5}, "bytes": {"total_bytes": 10}}
    assert figures.PSNR_GAIN.of(metrics) == 3.5 and figures.TOTAL_BYTES.of(metrics) == 10
    assert figures.ACCURACY.of(metrics) is None


def _marked(figure: figures.Figure) -> str:
    return "<" + figure.key + ":{}>"


#: Figures the printed summary shows, each given a value; a spec's format is swapped for a marked one below.
SHOWN_IN_SUMMARY = {figures.PSNR_MEAN: 12.5, figures.PSNR_GAIN: 1.25, figures.RECOVERED_FRACTION: 0.5,
                    figures.MIA_AUC: 0.625, figures.LABEL_SET_JACCARD: 0.75, figures.EPSILON_LOWER: 2.5,
                    figures.ACCURACY: 0.875, figures.UPLINK_BYTES: 1024, figures.EPSILON: 3.0,
                    figures.ATTRIBUTED_FRACTION: 0.25, figures.SOURCE_ACCURACY: 0.375}


@pytest.fixture
def marked_formats():
    """Every figure of ``SHOWN_IN_SUMMARY`` formatted as ``<key:value>`` while the test runs (the specs are frozen:
    their format is swapped in place and put back)."""
    before = {f: f.fmt for f in SHOWN_IN_SUMMARY}
    for f in before:
        object.__setattr__(f, "fmt", _marked(f))
    yield
    for f, fmt in before.items():
        object.__setattr__(f, "fmt", fmt)


def test_the_printed_summary_formats_each_figure_through_its_spec(marked_formats):
    metrics: dict = {"run": {"fl": "fedavg", "payload": "update", "attack": "ig", "seed": 0},
                     "privacy": {"num_true": 2}, "utility": {}, "bytes": {}, "defense": {"epsilon_covers_all_reads": True}}
    for f, value in SHOWN_IN_SUMMARY.items():
        metrics[f.section][f.key] = value
    text = " ".join(summary(metrics).split())  # unwrapped
    missing = [f.key for f, value in SHOWN_IN_SUMMARY.items() if f"<{f.key}:{value}>" not in text]
    assert not missing, (missing, text)


def test_the_multirun_table_formats_each_figure_through_its_spec(tmp_path, monkeypatch):
    import importlib

    from privbench.audit import sweep_summary

    collect, table = (importlib.import_module(f"privbench.report.{m}") for m in ("collect", "table"))

    runs = pd.DataFrame({"fl": ["fedavg"], "seed": [0], figures.PSNR_MEAN.key: [12.5], figures.MIA_AUC.key: [0.625]})
    monkeypatch.setattr(collect, "collect", lambda root: runs)
    monkeypatch.setattr(table, "summarise", lambda r: r.assign(**{figures.RUNS: 1}).pipe(
        lambda t: (t.attrs.update(keys=["fl"]), t)[1]))
    object.__setattr__(figures.MIA_AUC, "fmt", "<{}>")
    try:
        text = sweep_summary.combined_table(tmp_path)
    finally:
        object.__setattr__(figures.MIA_AUC, "fmt", "{:.3f}")
    assert "<0.625>" in text and "12.50" in text  # the swapped format, and PSNR's own ({:.2f})
