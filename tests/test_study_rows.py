"""Each committed study's table cannot go stale silently: one cheap row of each committed ``runs.csv`` is rerun
from its recorded overrides on today's code, with one torch thread as the studies ran, and every figure the row
holds must come back equal (to 1e-6 of its size); figures measured since the report was written are not compared.
A change that moves a committed figure fails here until the
study is rerun and its report rewritten.

``download_check`` has no runs (its table is a script's ROC, ``scores.csv``) and is checked by
``tests/test_download_roc.py``."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

import privbench
from privbench.report.claims import stale_reports
from privbench.report.collect import FIGURES, row

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "docs" / "studies"
#: Each committed report: the experiment its runs composed, and one cheap row (its overrides as recorded).
ROWS: dict[str, tuple[str, str]] = {
    "active_genefl": ("active_genefl", "attack.bins=4,fl.gene.score=cos,fl.gene.select=top,seed=0"),
    "active_server": ("active_server", "+experiment/active_server=gradient,attack.bins=64,seed=0,victim.num_images=8"),
    "adaptive_server": ("adaptive_server", "+experiment/adaptive_server/attack=disguised_trap_few,"
                                           "+experiment/adaptive_server=fedavg_secagg_inconsistent,seed=0,"
                                           "victim.num_images=8"),
    "agreed_download": ("adaptive_server", "++aggregation.agreed_download=True,+experiment/adaptive_server/attack=loki,"
                                           "+experiment/adaptive_server=fedavg_secagg,seed=0,victim.num_images=8"),
    "bytes_curve": ("bytes_curve", "+experiment/bytes_curve=fedavg,seed=0"),
    "client_dp": ("client_dp", "+experiment/client_dp/protocol=fedavg,+experiment/client_dp=plain,seed=0"),
    "client_dp_classes": ("client_dp_classes", "+experiment/client_dp=local_eps4,seed=0"),
    "client_dp_lira": ("client_dp_lira", "+experiment/client_dp=plain,+experiment/client_dp_lira/protocol=fedavg,"
                                         "seed=0"),
    "client_dp_uploads": ("client_dp_uploads", "+experiment/client_dp=eps4,+experiment/client_dp_uploads/protocol="
                                               "fedavg,+experiment/client_dp_uploads/read=source,seed=0"),
    "cohort_genefl": ("cohort_separation", "+experiment/cohort_separation/attack=peeled,"
                                           "+experiment/cohort_separation/protocol=secagg,fl.gene.select=bottom,"
                                           "fl=genefl,seed=0"),
    "cohort_genefl_shard": ("cohort_separation", "+experiment/cohort_separation/attack=peeled,"
                                                 "+experiment/cohort_separation/protocol=secagg_fine,"
                                                 "data.partition=shard,fl.gene.select=bottom,fl=genefl,seed=1"),
    "cohort_separation": ("cohort_separation", "+experiment/cohort_separation/attack=peeled,"
                                               "+experiment/cohort_separation/protocol=plain,seed=0"),
    "dlg_batch": ("dlg_batch", "attack.labels=sign,seed=0"),
    "dp_curve": ("dp_curve", "+experiment/dp_curve/arm=none,+experiment/dp_curve/read=gradient_idlg,seed=0"),
    "exact_batch": ("exact_batch", "seed=0,victim.num_images=8"),
    "exact_cpa": ("exact_cpa", "seed=0,victim.num_images=16"),
    "fedavg_leakage": ("fedavg_leakage", "+experiment/fedavg_leakage=ig_unroll,seed=0"),
    "learngene_completion": ("learngene_completion", "+experiment/learngene_completion/attack=rmia_online,"
                                                     "+experiment/learngene_completion/read=learngene_public,seed=0"),
    "loki": ("loki", "+experiment/loki/attack=imprint,+experiment/loki=one_step,model=lenet,seed=0"),
    "loki_victim": ("adaptive_server", "+experiment/adaptive_server/attack=loki,+experiment/adaptive_server="
                                       "fedavg_secagg,seed=0,victim.num_images=8"),
    "membership_ladder": ("membership_ladder", "+experiment/membership_ladder/protocol=fedavg,seed=0"),
    "membership_leakage": ("membership_leakage", "+experiment/membership_leakage/attack=loss,"
                                                 "+experiment/membership_leakage/protocol=fedavg,seed=0"),
    "photo_victims": ("photo_victims", "+experiment/photo_victims/arm=lenet_short,seed=0"),
    "privacy_tradeoff": ("privacy_tradeoff", "attack=idlg,defense=none,payload=gradient,seed=0"),
    "secure_aggregation": ("secure_aggregation", "+experiment/secure_aggregation=no_secagg,fl.participants=2,seed=0"),
    "server_threat": ("server_threat", "+experiment/server_threat/attack=imprint,+experiment/server_threat=fedavg,"
                                       "seed=0,victim.num_images=8"),
    "sme_leakage": ("sme_leakage", "+experiment/sme_leakage=sme,seed=0"),
    "threat_grid": ("threat_grid", "+experiment/threat_grid=gradient,seed=0,victim.num_images=1,victim.round=0,"
                                   "victim.update_data=batch"),
    "threat_grid2": ("threat_grid2", "+experiment/threat_grid2/setting=n8_e1_b4,+experiment/threat_grid2=gradient_ig,"
                                     "seed=0"),
    "trap_weights": ("trap_weights", "+experiment/trap_weights=paper_rows,model.hidden=[200,200],seed=0,"
                                     "victim.num_images=8"),
}


#: Reports whose row moved when this test was first run (2026-12-06), and what moved: the code changed after they were
#: written. docs/claims.yaml holds the list (claims.md marks the findings read from them); each must still move
#: (strict): rerunning the study and rewriting its report makes it pass, and its entry goes.
STALE = stale_reports(ROOT / "docs" / "claims.yaml")


def split_overrides(text: str) -> list[str]:
    """Hydra's ``override_dirname`` back into overrides: commas inside brackets belong to a value.

    Example:
        >>> split_overrides("model.hidden=[200,200],seed=0")
        ['model.hidden=[200,200]', 'seed=0']
    """
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    return [*out, text[start:]]


def committed_row(report: str, overrides: str) -> pd.Series:
    """The committed row of ``report`` whose recorded run folder is ``overrides`` (with the study's results_dir)."""
    runs = pd.read_csv(REPORTS / report / "runs.csv")
    recorded = runs["run_dir"].astype(str).str.lstrip("'").map(
        lambda d: ",".join(o for o in split_overrides(d) if not o.startswith("results_dir=")))
    found = runs[recorded == overrides]
    assert len(found) == 1, f"{report}: {len(found)} committed rows were run with {overrides}"
    return found.iloc[0]


def test_every_committed_report_with_runs_has_a_row_here() -> None:
    with_runs = {d.name for d in REPORTS.iterdir() if (d / "runs.csv").is_file()}
    assert with_runs == set(ROWS) and set(STALE) <= set(ROWS)
    for report, (_, overrides) in ROWS.items():
        committed_row(report, overrides)


def test_the_results_page_gives_each_committed_reports_command() -> None:
    text = (ROOT / "docs" / "results.md").read_text()
    block = text[text.index("```bash"):text.index("```", text.index("```bash") + 7)]
    for report in sorted(d.name for d in REPORTS.iterdir() if d.is_dir()):
        assert f"--out docs/studies/{report} " in block, f"docs/results.md gives no command that writes {report}"


@pytest.mark.slow  # one run each, 1 s to 6 min (fedavg_leakage)
@pytest.mark.parametrize("report", [pytest.param(r, marks=pytest.mark.xfail(strict=True, raises=AssertionError,
                                                                                    reason=f"stale: {STALE[r]}"))
                                    if r in STALE else r for r in sorted(ROWS)])
def test_a_committed_row_reproduces(report: str, tmp_path: Path) -> None:
    experiment, overrides = ROWS[report]
    want = committed_row(report, overrides)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        got = privbench.run([f"experiment={experiment}", *split_overrides(overrides)], results_dir=tmp_path)
    finally:
        torch.set_num_threads(threads)
    figures = row(got.metrics, got.run_dir)
    moved = []
    for key in FIGURES:
        old = float(want[key]) if key in want and pd.notna(want[key]) else math.nan
        new = float(figures.get(key, math.nan))
        if math.isnan(old):  # a figure the report did not hold (measured since) cannot be stale
            continue
        if math.isnan(new) or not math.isclose(old, new, rel_tol=1e-6, abs_tol=1e-9):
            moved.append(f"{key}: committed {old}, now {new}")
    assert not moved, f"{report} ({overrides}) moved; rerun the study and rewrite its report: " + "; ".join(moved)
