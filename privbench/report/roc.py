"""The membership figure: each setting's ROC on log-log axes, averaged over seeds, against the chance line."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privbench.figures import MIA_AUC
from privbench.metrics.membership import tpr_at
from privbench.report.gallery import members
from privbench.report.grouping import token
from privbench.report.plots import Drawn, _drawn, pyplot, series_names, style, value_text


def _curves(root: Path, group: pd.DataFrame) -> list[tuple[np.ndarray, np.ndarray, int]]:
    out = []
    for run_dir in group["run_dir"]:
        path = Path(root) / str(run_dir) / "membership.npz"
        if path.exists():
            with np.load(path) as d:
                out.append((d["fpr"], d["tpr"], int((~d["members"].astype(bool)).sum())))
    return out


def roc_figure(runs: pd.DataFrame, table: pd.DataFrame, root: Path) -> Drawn | None:
    """Per summary row with ``membership.npz`` in its runs: the mean over seeds of TPR at each FPR (log-log), one
    panel per payload; ``None`` when no run played the membership game."""
    keys = list(table.attrs.get("keys", []))
    settings: list[tuple[pd.Series, list[tuple[np.ndarray, np.ndarray, int]]]] = []
    for _, row in table.iterrows():
        curves = _curves(root, members(runs, keys, row))
        if curves:
            settings.append((row, curves))
    if not settings:
        return None
    panel_key = "payload" if "payload" in keys and len({token(r["payload"]) for r, _ in settings}) > 1 else None
    panels = list(dict.fromkeys(token(r[panel_key]) for r, _ in settings)) if panel_key else [None]
    titles = {token(r[panel_key]): value_text(r[panel_key]) for r, _ in settings} if panel_key else {}
    line_keys = [k for k in keys if k != panel_key]
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter

    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for c, panel in enumerate(panels):
        ax = axes[0][c]
        mine = [(r, cv) for r, cv in settings if panel_key is None or token(r[panel_key]) == panel]
        names = series_names([tuple(r[k] for k in line_keys) for r, _ in mine], line_keys) if line_keys else \
            ["all runs"] * len(mine)
        floor = 1.0 / max(n for _, cv in mine for _, _, n in cv)
        grid = np.geomspace(floor, 1.0, 200)
        for i, ((row, curves), name) in enumerate(zip(mine, names)):
            mean = np.mean([tpr_at(f, t, grid) for f, t, _ in curves], axis=0)
            look: dict[str, Any] = {k: v for k, v in style(i).items() if k != "marker"}
            auc = row.get(MIA_AUC.key, float("nan"))
            ax.plot(grid, np.maximum(mean, floor / 10), drawstyle="steps-post",
                    label=f"{name} (AUC {auc:.3f}, n={len(curves)})", **look)
        ax.plot(grid, grid, ":", color="k", lw=1, label="chance (TPR = FPR)" if c == 0 else None)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(floor, 1.0)
        ax.set_ylim(floor / 10, 1.05)
        ax.set_xlabel(f"false positive rate, log scale (from 1/{round(1 / floor)} non-members)")
        ax.set_ylabel("true positive rate, log scale (mean over seeds)")
        ax.set_title(f"{panel_key}={titles[str(panel)]}" if panel_key else "", fontsize=9)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.grid(alpha=0.3, which="both")
    handles: list[Any] = []
    labels: list[str] = []
    for ax in axes[0]:
        h, lab = ax.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=8, frameon=False)
    fig.suptitle("Membership ROC (log-log), mean over seeds", fontsize=11)
    fig.tight_layout()
    return _drawn(fig)
