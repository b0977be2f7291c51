"""The membership figure: each setting's ROC on log-log axes, averaged over seeds, against the chance line."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privbench.figures import MIA_AUC
from privbench.metrics.membership import tpr_at
from privbench.regular import load_arrays, regular
from privbench.report.draw import Drawn, drawn, pyplot, style
from privbench.report.gallery import members
from privbench.report.naming import Codes, facet_title, facets, series_names, setting_text


def _curves(root: Path, group: pd.DataFrame) -> list[tuple[np.ndarray, np.ndarray, int]]:
    out = []
    for run_dir in group["run_dir"]:
        path = Path(root) / str(run_dir) / "membership.npz"
        if regular(path):
            with load_arrays(path) as d:
                out.append((d["fpr"], d["tpr"], int((~d["members"].astype(bool)).sum())))
    return out


def roc_figure(runs: pd.DataFrame, table: pd.DataFrame, root: Path) -> Drawn | None:
    """Per summary row with ``membership.npz`` in its runs: the mean over seeds of TPR at each FPR (log-log), in
    panels of at most ``MAX_SERIES`` settings faceted by the keys that split them best (each setting's AUC in the
    remark); ``None`` when no run played the membership game."""
    keys = list(table.attrs.get("keys", []))
    settings: list[tuple[pd.Series, list[tuple[np.ndarray, np.ndarray, int]]]] = []
    for _, row in table.iterrows():
        curves = _curves(root, members(runs, keys, row))
        if curves:
            settings.append((row, curves))
    if not settings:
        return None
    frame = pd.DataFrame([r for r, _ in settings]).reset_index(drop=True)
    by, groups = facets(frame, keys)
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter

    columns = min(2, len(groups))
    rows = -(-len(groups) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6.2 * columns + 2.4, 4.2 * rows), squeeze=False,
                             layout="constrained")
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    codes, per_panel, aucs = Codes(), [], []
    rest = [k for k in keys if k not in by]
    for ax, positions in zip(axes.flat, groups):
        mine = [settings[p] for p in positions]
        names = series_names([tuple(r[k] for k in rest) for r, _ in mine], rest) if rest else ["all runs"] * len(mine)
        floor = 1.0 / max(n for _, cv in mine for _, _, n in cv)
        grid = np.geomspace(floor, 1.0, 200)
        labels = []
        for i, ((row, curves), name) in enumerate(zip(mine, names)):
            mean = np.mean([tpr_at(f, t, grid) for f, t, _ in curves], axis=0)
            look: dict[str, Any] = {k: v for k, v in style(i).items() if k != "marker"}
            label = codes.short(name, setting_text({k: row[k] for k in keys}))
            labels.append(label)
            aucs.append(f"{label}: AUC {row.get(MIA_AUC.key, float('nan')):.3f} (n={len(curves)})")
            ax.plot(grid, np.maximum(mean, floor / 10), drawstyle="steps-post", label=label, **look)
        per_panel.append(labels)
        ax.plot(grid, grid, ":", color="k", lw=1, label="chance")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(floor, 1.0)
        ax.set_ylim(floor / 10, 1.05)
        ax.set_xlabel(f"false positive rate, log scale (from 1/{round(1 / floor)} non-members)")
        ax.set_ylabel("true positive rate, log scale (mean over seeds)")
        ax.set_title(facet_title(mine[0][0], by), fontsize=9)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.grid(alpha=0.3, which="both")
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    fig.suptitle("Membership ROC (log-log), mean over seeds", fontsize=11)
    return drawn(fig, panels=per_panel, key=codes.key, remark="; ".join(aucs) + ".")
