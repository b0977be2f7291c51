"""The membership ladder of a sweep (``attack=mia_ladder``): per setting, each rung's AUC and TPR at FPR 1 % and
0.1 %, mean [95 % t] over seeds, and its AUC paired over seeds against a reference rung. Read from the run folders'
``metrics.json`` (``privacy.mia_ladder``), which ``runs.csv`` does not hold."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privbench.report.table import t_interval

#: The rung every other is paired against, where a setting ran it.
REFERENCE = "lira_online@64"


def _ladder(run_dir: Path) -> list[dict[str, Any]]:
    """A run's ladder (empty when the run did not climb one or its folder is gone)."""
    path = run_dir / "metrics.json"
    try:
        ladder = json.loads(path.read_text()).get("privacy", {}).get("mia_ladder")
    except (OSError, ValueError):
        return []
    return [r for r in ladder if isinstance(r, dict) and "rung" in r] if isinstance(ladder, list) else []


def _mean(values: list[float]) -> str:
    """Mean [95 % t] of a share (clipped to [0, 1])."""
    lo, hi = (min(max(b, 0.0), 1.0) for b in t_interval(pd.Series(values)))
    return f"{np.mean(values):.3f} [{lo:.3f}, {hi:.3f}]" if len(values) > 1 else f"{np.mean(values):.3f}"


def _paired(rung: dict[int, float], reference: dict[int, float]) -> str:
    seeds = sorted(set(rung) & set(reference))
    if len(seeds) < 2:
        return "-"
    d = [rung[s] - reference[s] for s in seeds]
    lo, hi = t_interval(pd.Series(d))
    above = sum(x > 0 for x in d)
    return f"{np.mean(d):+.3f} [{lo:+.3f}, {hi:+.3f}], above in {above} of {len(d)}"


def ladder_markdown(runs: pd.DataFrame, keys: list[str], root: Path) -> str | None:
    """One table of every setting (the grouping ``keys`` but the seed) of the runs under ``root`` (``run_dir`` is
    relative to it) that climbed a ladder, a row per setting and rung; None if none did."""
    rows: list[str] = []
    keys = [k for k in keys if k in runs.columns and k != "seed"]
    groups = runs.groupby(keys, dropna=False, sort=True) if keys else [((), runs)]
    for setting, frame in groups:
        climbed = {int(row.seed): _ladder(Path(root) / str(row.run_dir)) for row in frame.itertuples()}
        climbed = {s: ladder for s, ladder in climbed.items() if ladder}
        if not climbed:
            continue
        names = list(dict.fromkeys(r["rung"] for ladder in climbed.values() for r in ladder))
        by = {n: {s: r for s, ladder in climbed.items() for r in ladder if r["rung"] == n} for n in names}
        reference = {s: float(r["auc"]) for s, r in by.get(REFERENCE, {}).items() if "auc" in r}
        label = ", ".join(f"{k}={v}" for k, v in zip(keys, setting if isinstance(setting, tuple) else (setting,)))
        first = f"| {label or 'all runs'} | {', '.join(map(str, sorted(climbed)))} "
        for n in names:
            ran = {s: r for s, r in by[n].items() if "auc" in r}
            if not ran:
                why = next(iter(by[n].values())).get("skipped", "")
                rows.append(f"{first}| {n} | not run: {why} | | | |")
                continue
            auc = {s: float(r["auc"]) for s, r in ran.items()}
            rows.append(f"{first}| {n} | {_mean(list(auc.values()))} | "
                        f"{_mean([float(r['tpr_1']) for r in ran.values()])} | "
                        f"{_mean([float(r['tpr_01']) for r in ran.values()])} | "
                        f"{'-' if n == REFERENCE else _paired(auc, reference)} |")
    if not rows:
        return None
    return ("# Membership ladder\n\nEach rung on the same candidates, references and seed; mean [95 % t over seeds]; "
            "chance AUC 0.5, TPR = FPR. A rung's Clopper-Pearson interval for one run is in its summary.\n\n"
            f"| setting | seeds | rung | AUC | TPR at FPR 1 % | TPR at FPR 0.1 % | AUC minus {REFERENCE}'s, paired over "
            "seeds |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
