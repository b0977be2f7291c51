"""Trade-off plots: PSNR vs epsilon, PSNR vs bytes, accuracy vs epsilon, the Pareto front."""
from __future__ import annotations

from typing import Any

import io
from pathlib import Path

import numpy as np
import pandas as pd

from privbench.io import atomic_write_bytes


def pareto_front(table: pd.DataFrame) -> pd.Series:
    """Rows not dominated on (lower PSNR, higher accuracy, fewer total bytes); NaN rows are never on it."""
    cols = table[["psnr_mean", "accuracy", "total_bytes"]].to_numpy(dtype=float)
    ok = ~np.isnan(cols).any(1)
    points = np.column_stack([cols[:, 0], -cols[:, 1], cols[:, 2]])  # all three: lower is better
    on = np.zeros(len(table), dtype=bool)
    for i in np.flatnonzero(ok):
        dominated = ok & (points <= points[i]).all(1) & (points < points[i]).any(1)
        on[i] = not dominated.any()
    return pd.Series(on, index=table.index)


def _label(row: Any) -> str:
    return f"{row.fl}/{row.payload}/{row.attack}/{row.defense} {row.setting}".replace(" -", "")


def _scatter(table: pd.DataFrame, x: str, y: str, title: str, *, logx: bool = False, highlight: Any = None) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    data = table.dropna(subset=[x, y])
    for (defense, group) in data.groupby("defense"):
        ax.scatter(group[x], group[y], label=defense, s=40)
    if highlight is not None:
        front = data[highlight.reindex(data.index).fillna(False).astype(bool)]
        ax.scatter(front[x], front[y], facecolors="none", edgecolors="k", s=140, label="Pareto front")
    for row in data.itertuples():
        ax.annotate(_label(row), (getattr(row, x), getattr(row, y)), fontsize=6, alpha=0.7)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title if not data.empty else f"{title} (no runs with both values)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def write_plots(table: pd.DataFrame, out: Path) -> dict[str, Path]:
    """Write the four plots as PNG files under ``out``; return them by name."""
    front = pareto_front(table)
    specs = {
        "psnr_vs_epsilon": ("epsilon", "psnr_mean", "Leakage vs epsilon (DP-SGD runs)", False, None),
        "psnr_vs_bytes": ("total_bytes", "psnr_mean", "Leakage vs bytes on the wire", True, None),
        "accuracy_vs_epsilon": ("epsilon", "accuracy", "Accuracy vs epsilon (DP-SGD runs)", False, None),
        "pareto": ("psnr_mean", "accuracy", "Privacy-accuracy-bytes Pareto front (circled)", False, front),
    }
    paths = {}
    for name, (x, y, title, logx, highlight) in specs.items():
        paths[name] = Path(out) / f"{name}.png"
        atomic_write_bytes(paths[name], _scatter(table, x, y, title, logx=logx, highlight=highlight))
    return paths
