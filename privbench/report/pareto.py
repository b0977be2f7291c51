"""The leakage-accuracy-bytes Pareto plot: every setting a point coloured by its bytes, the front circled and
labelled (only the front: the table names every setting)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from privbench.figures import ACCURACY, DOWNLOADED_ACCURACY, PERSONAL_ACCURACY, PSNR_GAIN, TOTAL_BYTES, Figure
from privbench.report.draw import FRONT, OTHERS, Drawn, drawn, failed_band, pyplot, spans_decades
from privbench.report.naming import Codes, series_names, setting_text


def utility_figure(table: pd.DataFrame) -> Figure:
    """The accuracy a trade-off figure plots: own-model accuracy where every row has it, else downloaded-model
    accuracy where every row has it, else the runs' headline ``accuracy`` (old runs), so one axis never mixes two."""
    scored = table[ACCURACY.key].notna() if ACCURACY.key in table else pd.Series(True, index=table.index)
    for f in (PERSONAL_ACCURACY, DOWNLOADED_ACCURACY):
        if f.key in table and table.loc[scored, f.key].notna().all() and table[f.key].notna().any():
            return f
    return ACCURACY


def pareto_front(table: pd.DataFrame, *, leakage: str = PSNR_GAIN.key, utility: str | None = None) -> pd.Series:
    """Rows not dominated on (lower ``leakage``, higher accuracy, fewer total bytes); NaN rows are never on it.

    A gain at or below zero is a failed attack, not a depth of privacy: all such rows count as leaking
    nothing (0), so how far below chance an attack failed never ranks one setting above another.
    """
    utility = utility or utility_figure(table).key
    cols = table[[leakage, utility, TOTAL_BYTES.key]].to_numpy(dtype=float)
    ok = ~np.isnan(cols).any(1)
    leaked = np.maximum(cols[:, 0], 0.0) if leakage == PSNR_GAIN.key else cols[:, 0]
    points = np.column_stack([leaked, -cols[:, 1], cols[:, 2]])  # all three: lower is better
    on = np.zeros(len(table), dtype=bool)
    for i in np.flatnonzero(ok):
        dominated = ok & (points <= points[i]).all(1) & (points < points[i]).any(1)
        on[i] = not dominated.any()
    return pd.Series(on, index=table.index)


def _plotted(table: pd.DataFrame) -> tuple[pd.DataFrame, Figure]:
    """The settings a Pareto plot shows (gain, accuracy and bytes known; a setting that sends nothing drawn at a
    gain of 0, flagged ``_silent``) and the accuracy it plots."""
    utility = utility_figure(table)
    if not {PSNR_GAIN.key, utility.key, TOTAL_BYTES.key} <= set(table.columns):
        return table.iloc[:0].assign(_silent=False), utility
    silent = (table[TOTAL_BYTES.key] == 0) & table[PSNR_GAIN.key].isna()
    table = table.assign(**{PSNR_GAIN.key: table[PSNR_GAIN.key].mask(silent, 0.0), "_silent": silent})
    return table.dropna(subset=[PSNR_GAIN.key, utility.key, TOTAL_BYTES.key]).reset_index(drop=True), utility


def trades_off(table: pd.DataFrame) -> bool:
    """Whether accuracy trades off against leakage or bytes: at least 3 settings with a gain, an accuracy and bytes,
    and at least 2 distinct points (failed gains as 0) on their front. Otherwise a Pareto plot has nothing to show.

    Example:
        >>> t = pd.DataFrame({"psnr_gain": [10.0, 20.0, 5.0], "accuracy": [0.8, 0.9, 0.5], "total_bytes": 1.0})
        >>> trades_off(t), trades_off(t.iloc[:2]), trades_off(t.assign(accuracy=0.8))
        (True, False, False)
    """
    data, utility = _plotted(table)
    if len(data) < 3:
        return False
    on = data[pareto_front(data, utility=utility.key)]
    return len({(max(float(r[PSNR_GAIN.key]), 0.0), float(r[utility.key])) for _, r in on.iterrows()}) >= 2


def _label_front(ax: Any, spots: list[tuple[float, float, str]]) -> None:
    """Label each front point; labels of points closer than 6 % of the axes fan out on leader lines."""
    ax.figure.canvas.draw()
    to_axes = ax.transData + ax.transAxes.inverted()
    where = [to_axes.transform((u, g)) for u, g, _ in spots]
    order = sorted(range(len(spots)), key=lambda i: (-where[i][1], where[i][0]))
    crowded = {i for i in order for j in order if i != j and np.hypot(*(where[i] - where[j])) < 0.06}
    fanned = 0
    for i in order:
        u, g, text = spots[i]
        left = where[i][0] > 0.6
        if i not in crowded:
            ax.annotate(text, (u, g), textcoords="offset points", xytext=(-9 if left else 9, 7), fontsize=8,
                        ha="right" if left else "left", zorder=4)
            continue
        ax.annotate(text, (u, g), textcoords="offset points", xytext=(-60 if left else 60, 30 - 14 * fanned),
                    fontsize=8, ha="right" if left else "left", va="center", zorder=4,
                    arrowprops={"arrowstyle": "-", "color": "0.4", "lw": 0.7})
        fanned += 1


def front_labels(on: pd.DataFrame, keys: list[str]) -> tuple[list[str], list[str]]:
    """Each front setting's label, by the keys that differ between the front settings (a code ``S1``, ... over 30
    characters), and the key that spells out every labelled setting in full."""
    names = series_names([tuple(r[k] for k in keys) for _, r in on.iterrows()], keys) if keys else \
        ["all runs"] * len(on)
    codes, labels, key = Codes(), [], []
    for (_, r), name in zip(on.iterrows(), names):
        silent = " (sends nothing)" if bool(r.get("_silent", False)) else ""
        full = setting_text({k: r[k] for k in keys}) + silent
        labels.append(codes.short(name + silent, full))
        key.append(f"{labels[-1]} = {full}")
    return labels, key


def pareto_figure(table: pd.DataFrame, keys: list[str]) -> Drawn | None:
    """Leakage (PSNR gain over chance) against accuracy, coloured by total bytes; the front circled and each front
    setting labelled by the keys that tell the front apart (``front_labels``; ``key`` spells each out in full).

    A setting that sends nothing (local-only: 0 bytes, no attack) leaks nothing on the wire: it is drawn at a gain
    of 0."""
    data, utility = _plotted(table)
    if data.empty:
        return None
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.lines import Line2D

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.6), layout="constrained")
    front = pareto_front(data, utility=utility.key)
    megabytes = data[TOTAL_BYTES.key] / 1e6
    lo, hi = float(megabytes.min()), float(megabytes.max())
    title = f"Leakage vs accuracy vs bytes: {len(data)} settings, the {int(front.sum())} on the Pareto front labelled"
    if hi > lo:
        norm = LogNorm(lo, hi) if spans_decades(megabytes) else Normalize(lo, hi)
        points = ax.scatter(data[utility.key], data[PSNR_GAIN.key], c=megabytes, norm=norm, cmap="viridis",
                            s=55, zorder=2, edgecolors="white", linewidths=0.5)
        colourbar = fig.colorbar(points, ax=ax, label="total bytes, up + down (MB)")
        if hasattr(colourbar.formatter, "set_useOffset"):  # a linear scale's; a log scale has no offset to hide
            colourbar.formatter.set_useOffset(False)
            colourbar.update_ticks()
    else:
        ax.scatter(data[utility.key], data[PSNR_GAIN.key], s=55, zorder=2, color="C0")
        title += f"\n(every setting sends {lo * 1e6:,.0f} B)"
    on = data[front]
    ax.scatter(on[utility.key], on[PSNR_GAIN.key], facecolors="none", edgecolors="k", s=200, linewidths=1.5,
               zorder=3)
    ax.margins(x=0.12, y=0.15)
    failed_band(ax)
    labels, key = front_labels(on, keys)
    _label_front(ax, [(float(r[utility.key]), float(r[PSNR_GAIN.key]), label)
                      for (_, r), label in zip(on.iterrows(), labels)])
    ax.set_xlabel(utility.label)
    ax.set_ylabel("PSNR gain over chance (dB; lower is more private)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    marks = [Line2D([], [], ls="none", marker="o", mfc="none", mec="k", ms=11, mew=1.5),
             Line2D([], [], ls="none", marker="o", color="0.5", ms=6)]
    ax.legend(marks, [FRONT, OTHERS], fontsize=8, loc="best")
    return drawn(fig, panels=[], key=key)
