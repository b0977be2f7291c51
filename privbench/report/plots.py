"""Report figures: a curve per swept numeric setting, bytes per setting, and the leakage-accuracy-bytes Pareto plot."""
from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privbench.io import atomic_write_bytes
from privbench.report.grouping import is_attack_side, token, training_keys
from privbench.report.table import summarise
from privbench.figures import (
    ACCURACY, DOWNLINK_BYTES, LEAKAGE_PLOTS, PSNR_CHANCE, PSNR_GAIN, PSNR_MEAN, TOTAL_BYTES,
    UPLINK_BYTES, UTILITY_PLOTS,
)

#: Axis labels of swept config keys (others are shown by their key).
KEY_LABELS = {"defense.target_epsilon": "target epsilon of DP-SGD (delta 1e-5)",
              "victim.num_images": "victim batch (images)", "victim.round": "victim round",
              "fl.gene.gamma": "gene layers (gamma)", "defense.sigma": "noise sigma (gradient units)",
              "defense.p": "pruned fraction"}
LEAKAGE = [(f.key, f.label) for f in LEAKAGE_PLOTS]
UTILITY = [(f.key, f.label) for f in UTILITY_PLOTS]
MARKERS = "osD^v<>pX*"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    # run-controlled strings (config values in legends and titles) are text, never mathtext ($...$) or TeX
    matplotlib.rcParams["text.parse_math"] = False
    matplotlib.rcParams["text.usetex"] = False
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    _plt().close(fig)
    return buffer.getvalue()


def _label(row: pd.Series, keys: list[str]) -> str:
    """A setting's legend text: its values of ``keys``, missing ones left out."""
    def text(k: str) -> str:
        return str(row[k]) if k in ("payload", "attack", "defense", "fl") else f"{k.split('.')[-1]}={row[k]}"

    return ", ".join(text(k) for k in keys if token(row[k]) != token(None)) or "all runs"


def _values(value: Any) -> tuple[Any, ...]:
    """A groupby index entry as a tuple (pandas gives a scalar for one key)."""
    return value if isinstance(value, tuple) else (value,)


def _where(frame: pd.DataFrame, keys: list[str], value: Any) -> pd.Series:
    """Rows of ``frame`` whose ``keys`` equal ``value`` (a groupby index entry), missing values matching missing."""
    mask = pd.Series(True, index=frame.index)
    for k, v in zip(keys, _values(value)):
        mask &= frame[k].map(token) == token(v)
    return mask


def _spans_decades(values: pd.Series) -> bool:
    v = values.dropna().to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    return len(v) > 1 and v.min() > 0 and v.max() / v.min() >= 10


def swept_keys(runs: pd.DataFrame, keys: list[str]) -> list[str]:
    """Grouping keys with at least 3 distinct numeric values: drawn as curves."""
    out = []
    for key in keys:
        values = pd.to_numeric(runs[key], errors="coerce")
        if values.notna().any() and values.dropna().nunique() >= 3 and runs[key].map(
                lambda v: isinstance(v, (int, float, np.number)) and not isinstance(v, bool)).all():
            out.append(key)
    return out


def _one_per_training(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One run per training setting and seed (utility, bytes and epsilon belong to the training, not to each attack
    on it, so averaging every attack's copy would count one training several times)."""
    return runs.loc[runs[[*training_keys(keys), "seed"]].map(token).drop_duplicates().index]


def curve(runs: pd.DataFrame, keys: list[str], x: str, panels: list[tuple[str, str]], *, title: str) -> bytes | None:
    """Lines of each figure in ``panels`` against ``x`` (mean, 95% t-band over seeds), one line per setting of
    the other keys; settings without ``x`` (e.g. no DP on an epsilon axis) are dashed horizontal references.
    Facets (rows of panels) split settings when more than 6 lines would share a panel.
    """
    panels = [(y, label) for y, label in panels if y in runs and runs[y].notna().any()]
    if not panels:
        return None
    others = [k for k in keys if k != x]
    table = summarise(runs, [x, *others])
    table["_x"] = pd.to_numeric(table[x], errors="coerce")
    lines = [k for k in others if is_attack_side(k)]
    facets = [k for k in others if not is_attack_side(k)]
    swept = table[table["_x"].notna()]
    facets = [k for k in facets if swept[k].map(token).nunique() > 1]
    if not lines or (facets and swept.groupby(facets + lines, dropna=False).ngroups <= 6):
        lines, facets = lines + facets, []
    if len(lines) == 0 and facets:
        lines, facets = facets[:1], facets[1:]
    facet_values = swept.groupby(facets, dropna=False, sort=False).size().index.tolist() if facets else [None]
    plt = _plt()
    fig, axes = plt.subplots(len(facet_values), len(panels), figsize=(5.2 * len(panels), 3.4 * len(facet_values)),
                             squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    line_ids = table.groupby(lines, dropna=False, sort=False).size().index.tolist() if lines else [None]
    rest = [k for k in others if k not in lines]
    log_x = _spans_decades(table["_x"])
    for r, facet in enumerate(facet_values):
        sub = table[_where(table, facets, facet) | table["_x"].isna()] if facets else table
        for c, (y, label) in enumerate(panels):
            ax = axes[r][c]
            for i, line in enumerate(line_ids):
                part = sub[_where(sub, lines, line)] if lines else sub
                colour = colours[i % len(colours)]
                pts = part[part["_x"].notna()].sort_values("_x")
                if lines:
                    name = ", ".join(map(str, _values(line)))
                else:  # one line: name it by what its points share (e.g. defense=dpsgd)
                    name = ", ".join(str(pts[k].iloc[0]) for k in rest) if len(pts) and rest else "all runs"
                if pts[y].notna().any():
                    ax.plot(pts["_x"], pts[y], "o-", color=colour, label=name, ms=4)
                    ax.fill_between(pts["_x"], pts[f"{y}_lo"], pts[f"{y}_hi"], color=colour, alpha=0.15, lw=0)
                    if y == PSNR_MEAN.key and PSNR_CHANCE.key in pts and pts[PSNR_CHANCE.key].notna().any():
                        ax.plot(pts["_x"], pts[PSNR_CHANCE.key], ":", color=colour, lw=1.2,
                                label="chance of each line (dotted)" if i == 0 else None)
                for _, ref in part[part["_x"].isna()].iterrows():
                    if not math.isnan(ref[y]):
                        what = ", ".join(f"{k}={ref[k]}" for k in rest if token(ref[k]) != token(None))
                        ref_label = f"{name}: {what}" if lines else (what or f"no {x}")
                        ax.axhline(ref[y], color=colour, ls="--", lw=1, label=ref_label)
                        if not math.isnan(ref[f"{y}_lo"]):
                            ax.axhspan(ref[f"{y}_lo"], ref[f"{y}_hi"], color=colour, alpha=0.05, lw=0)
            if y == PSNR_GAIN.key:
                ax.axhline(0.0, color="k", ls=":", lw=1, label="chance")
            if log_x:
                ax.set_xscale("log")
            ax.set_xlabel(KEY_LABELS.get(x, x) + (", log scale" if log_x else ""))
            ax.set_ylabel(label)
            head = ", ".join(f"{k}={v}" for k, v in zip(facets, _values(facet)))
            ax.set_title(head if facets else "", fontsize=9)
            ax.grid(alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(3, max(1, len(names))),
               fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return _png(fig)


def bytes_figure(runs: pd.DataFrame, keys: list[str]) -> bytes | None:
    """Uplink and downlink per setting (bars), and leakage and accuracy against total bytes (points, t-intervals);
    one shared legend names the settings."""
    train = training_keys(keys)
    table = summarise(_one_per_training(runs, keys), train) if train else None
    if table is None or table[TOTAL_BYTES.key].dropna().nunique() < 2:
        return None
    leak = summarise(runs, keys)
    plt = _plt()
    fig = plt.figure(figsize=(13, 4.5 + 0.28 * len(table)))
    grid = fig.add_gridspec(2, 2, height_ratios=[0.28 * len(table) + 0.8, 3.2])
    bars = fig.add_subplot(grid[0, :])
    order = table.sort_values(TOTAL_BYTES.key)
    labels = [_label(r, train) for _, r in order.iterrows()]
    bars.barh(labels, order[UPLINK_BYTES.key] / 1e6, label="uplink")
    bars.barh(labels, order[DOWNLINK_BYTES.key] / 1e6, left=order[UPLINK_BYTES.key] / 1e6, label="downlink")
    bars.set_xlabel("bytes sent in training (MB, 10^6 B)")
    bars.legend(fontsize=8, loc="lower right")
    bars.tick_params(axis="y", labelsize=7)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    style = {label: (colours[i % 10], MARKERS[(i // 10) % len(MARKERS)]) for i, label in enumerate(labels)}
    for c, (source, y, label) in enumerate([(leak, PSNR_GAIN.key, PSNR_GAIN.label),
                                            (table, ACCURACY.key, ACCURACY.label)]):
        ax = fig.add_subplot(grid[1, c])
        for _, r in source.sort_values(TOTAL_BYTES.key).iterrows():
            name = _label(r, train)
            if math.isnan(r[y]) or name not in style:
                continue
            err = None if math.isnan(r[f"{y}_lo"]) else [[r[y] - r[f"{y}_lo"]], [r[f"{y}_hi"] - r[y]]]
            colour, marker = style[name]
            ax.errorbar([r[TOTAL_BYTES.key] / 1e6], [r[y]], yerr=err, fmt=marker, color=colour, capsize=3, label=name)
        if _spans_decades(source[TOTAL_BYTES.key]):
            ax.set_xscale("log")
        if y == PSNR_GAIN.key:
            ax.axhline(0.0, color="k", ls=":", lw=1)
        ax.set_xlabel("total bytes, up + down (MB)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    handles, names = fig.axes[-1].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=7, frameon=False)
    fig.suptitle("What each setting sends, and what it costs in leakage and accuracy (mean, 95% t-interval)",
                 fontsize=11)
    fig.tight_layout()
    return _png(fig)


def pareto_front(table: pd.DataFrame, *, leakage: str = PSNR_GAIN.key) -> pd.Series:
    """Rows not dominated on (lower ``leakage``, higher accuracy, fewer total bytes); NaN rows are never on it."""
    cols = table[[leakage, ACCURACY.key, TOTAL_BYTES.key]].to_numpy(dtype=float)
    ok = ~np.isnan(cols).any(1)
    points = np.column_stack([cols[:, 0], -cols[:, 1], cols[:, 2]])  # all three: lower is better
    on = np.zeros(len(table), dtype=bool)
    for i in np.flatnonzero(ok):
        dominated = ok & (points <= points[i]).all(1) & (points < points[i]).any(1)
        on[i] = not dominated.any()
    return pd.Series(on, index=table.index)


def pareto_figure(table: pd.DataFrame, keys: list[str]) -> bytes | None:
    """Leakage (PSNR gain over chance) against known-client accuracy, coloured by total bytes; the front circled."""
    data = table.dropna(subset=[PSNR_GAIN.key, ACCURACY.key, TOTAL_BYTES.key])
    if data.empty:
        return None
    from matplotlib.colors import LogNorm, Normalize

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    front = pareto_front(data)
    megabytes = data[TOTAL_BYTES.key] / 1e6
    lo, hi = float(megabytes.min()), float(megabytes.max())
    title = "Leakage vs accuracy vs bytes: settings on the Pareto front are circled"
    if hi > lo:
        norm = LogNorm(lo, hi) if _spans_decades(megabytes) else Normalize(lo, hi)
        points = ax.scatter(data[ACCURACY.key], data[PSNR_GAIN.key], c=megabytes, norm=norm, cmap="viridis",
                            s=36, zorder=2)
        colourbar = fig.colorbar(points, ax=ax, label="total bytes, up + down (MB)")
        colourbar.formatter.set_useOffset(False)
        colourbar.update_ticks()
    else:
        ax.scatter(data[ACCURACY.key], data[PSNR_GAIN.key], s=36, zorder=2)
        title += f"\n(every setting sends {lo * 1e6:,.0f} B)"
    for i, (_, r) in enumerate(data[front].sort_values(ACCURACY.key).iterrows()):
        ax.scatter([r[ACCURACY.key]], [r[PSNR_GAIN.key]], facecolors="none", edgecolors="k", s=160,
                   marker=MARKERS[i % len(MARKERS)], label=_label(r, keys), zorder=3)
    ax.axhline(0.0, color="k", ls=":", lw=1)
    ax.set_xlabel("known-client accuracy")
    ax.set_ylabel("PSNR gain over chance (dB; lower is more private)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02 if hi == lo else 1.3, 1.0), frameon=False,
                  title="Pareto front")
    fig.tight_layout()
    return _png(fig)


def write_plots(runs: pd.DataFrame, table: pd.DataFrame, out: Path) -> dict[str, Path]:
    """Write every figure that the runs support as PNG under ``out``; return them by title."""
    keys = list(table.attrs.get("keys", []))
    figures: dict[str, tuple[str, bytes | None]] = {}
    for x in swept_keys(runs, keys):
        name = x.replace(".", "_")
        figures[f"Leakage vs {x}"] = (f"leakage_vs_{name}.png",
                                      curve(runs, keys, x, LEAKAGE, title=f"Leakage vs {KEY_LABELS.get(x, x)}"))
        train = training_keys(keys)
        if x in train:
            figures[f"Utility vs {x}"] = (f"utility_vs_{name}.png", curve(
                _one_per_training(runs, keys), train, x, UTILITY, title=f"Accuracy vs {KEY_LABELS.get(x, x)}"))
    figures["Bytes"] = ("bytes.png", bytes_figure(runs, keys))
    figures["Pareto"] = ("pareto.png", pareto_figure(table, keys))
    paths = {}
    for title, (file, png) in figures.items():
        if png is not None:
            paths[title] = Path(out) / file
            atomic_write_bytes(paths[title], png)
    return paths
