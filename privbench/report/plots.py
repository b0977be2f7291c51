"""Report figures: a curve per swept numeric setting, bytes per setting, and the leakage-accuracy-bytes Pareto plot."""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privbench.io import atomic_write_bytes
from privbench.report.grouping import is_attack_side, token, training_keys
from privbench.report.table import summarise
from privbench.figures import (
    ACCURACY, AUDIT_PLOTS, COMPANIONS, DOWNLINK_BYTES, DOWNLOADED_ACCURACY, LEAKAGE_PLOTS, MISSING, PERSONAL_ACCURACY,
    PSNR_GAIN, TOTAL_BYTES, UPLINK_BYTES, UTILITY_PLOTS, Figure,
)

#: Axis labels of swept config keys (others are shown by their key).
KEY_LABELS = {"defense.target_epsilon": "target epsilon of DP-SGD (delta 1e-5)",
              "victim.num_images": "victim batch (images)", "victim.round": "victim round",
              "fl.gene.gamma": "gamma (a count of gene layers, or a fraction of the layers or the size)",
              "defense.sigma": "noise sigma (gradient units)",
              "defense.noise_multiplier": "DP-SGD noise multiplier sigma (clip norm units)",
              "defense.p": "pruned fraction"}
LEAKAGE = [(f.key, f.label) for f in LEAKAGE_PLOTS]
UTILITY = [(f.key, f.label) for f in UTILITY_PLOTS]
AUDIT = [(f.key, f.label) for f in AUDIT_PLOTS]
MARKERS = "osD^v<>pX*"
#: Line dashes, one per ten series (each ten share the colour cycle), then per reference line.
DASHES = ["-", "--", "-.", ":"]
REFERENCE_DASHES = [(0, (6, 2)), (0, (2, 2)), (0, (6, 2, 1, 2)), (0, (1, 1)), (0, (8, 2, 1, 2, 1, 2))]


@dataclass
class Drawn:
    """A figure's PNG and the text drawn on it (legend entries, axis labels and titles, x tick labels, point
    labels), so the page can show it and a test can read it."""

    png: bytes
    legend: list[str] = field(default_factory=list)
    axes: list[str] = field(default_factory=list)
    ticks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def style(i: int) -> dict[str, Any]:
    """The ``i``-th series' colour, marker and dash: ten colours, and each further ten another marker and dash,
    so no two series of one figure look alike.

    Example:
        >>> style(0) != style(10) and style(0)["color"] == style(10)["color"]
        True
    """
    colours = pyplot().rcParams["axes.prop_cycle"].by_key()["color"]
    return {"color": colours[i % len(colours)], "marker": MARKERS[(i + i // len(colours)) % len(MARKERS)],
            "linestyle": DASHES[(i // len(colours)) % len(DASHES)]}


def value_text(value: Any) -> str:
    """A config value in a legend: whole numbers without a decimal point, missing values as the missing marker,
    lists without spaces (a legend's ", " separates settings).

    Example:
        >>> value_text(4.0), value_text([1000, 200]), value_text("[1000, 200]")
        ('4', '[1000,200]', '[1000,200]')
    """
    if token(value) == token(None):
        return MISSING
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(value_text(v) for v in value) + "]"
    text = str(value)
    return text.replace(", ", ",") if text.startswith("[") and text.endswith("]") else text


def _key_names(keys: list[str]) -> dict[str, str]:
    """Each key's name in a legend: its last part (``num_images``), the whole key where two would collide."""
    short = {k: k.split(".")[-1] for k in keys}
    clashes = {v for v in short.values() if list(short.values()).count(v) > 1}
    return {k: (k if short[k] in clashes else short[k]) for k in keys}


def series_names(settings: list[tuple[Any, ...]], keys: list[str]) -> list[str]:
    """A legend name per setting: ``key=value`` for each of ``keys`` whose value differs between the settings.

    Example:
        >>> series_names([("update", float("nan")), ("gradient", 4.0)], ["payload", "victim.num_images"])
        ['payload=update, num_images=-', 'payload=gradient, num_images=4']
    """
    names = _key_names(keys)
    differ = [i for i, k in enumerate(keys) if len({token(s[i]) for s in settings}) > 1]
    if not differ and keys:
        differ = list(range(len(keys)))
    out = [", ".join(f"{names[keys[i]]}={value_text(s[i])}" for i in differ) or "all runs" for s in settings]
    return out


def _ticks_at(ax: Any, values: pd.Series, *, log: bool) -> None:
    """Ticks at the swept values, whole numbers shown as such (no 1.5 on a count axis, no bare 10^0 on a log one);
    more than 8 are slanted so they do not overlap."""
    from matplotlib.ticker import FixedLocator, NullLocator

    v = sorted({float(x) for x in values.dropna() if np.isfinite(float(x))})
    if not v or len(v) > 16:
        return
    ax.xaxis.set_major_locator(FixedLocator(v))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([value_text(x) if x.is_integer() else f"{x:.3g}" for x in v],
                       rotation=45 if len(v) > 8 else 0, ha="right" if len(v) > 8 else "center")
    if log:
        ax.minorticks_off()


def _drawn(fig: Any) -> Drawn:
    """The PNG of ``fig`` and every text on it."""
    legend, axes, ticks, notes = [], [], [], []
    for legend_box in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]:
        legend += [t.get_text() for t in legend_box.get_texts()]
    fig.canvas.draw()
    for ax in fig.axes:
        axes += [t for t in (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) if t]
        ticks += [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        notes += [t.get_text() for t in ax.texts if t.get_text()]
    if fig.get_suptitle():
        axes.append(fig.get_suptitle())
    return Drawn(_png(fig), legend, axes, ticks, notes)


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, with run-controlled text drawn as text."""
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
    pyplot().close(fig)
    return buffer.getvalue()


def _values(value: Any) -> tuple[Any, ...]:
    """A groupby index entry as a tuple (pandas gives a scalar for one key)."""
    return value if isinstance(value, tuple) else (value,)


def _where(frame: pd.DataFrame, keys: list[str], value: Any) -> pd.Series:
    """Rows of ``frame`` whose ``keys`` equal ``value`` (a groupby index entry), missing values matching missing."""
    mask = pd.Series(True, index=frame.index)
    for k, v in zip(keys, _values(value)):
        mask &= frame[k].map(token) == token(v)
    return mask


def _spans_decades(values: pd.Series, *, ratio: float = 10, zeros: bool = False) -> bool:
    """Whether the finite values are positive (or, with ``zeros``, zero: a symlog axis shows them) and their
    positive ones span ``ratio`` or more."""
    v = values.dropna().to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    positive = v[v > 0]
    allowed = (v >= 0).all() if zeros else (v > 0).all()
    return bool(allowed) and len(positive) > 1 and positive.max() / positive.min() >= ratio


def _log_scale(ax: Any, axis: str, values: pd.Series) -> None:
    """Log scale on ``axis``, or symlog (linear below the smallest positive value) where a value is 0."""
    v = values.dropna().to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    from matplotlib.ticker import FuncFormatter

    scale = ax.set_xscale if axis == "x" else ax.set_yscale
    if (v > 0).all():
        scale("log")
    else:
        scale("symlog", linthresh=float(v[v > 0].min()), linscale=0.5)
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))


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


def _fit_x(ax: Any, values: pd.Series) -> None:
    """The x range of the swept values with a 3 % margin in the axis' own (log or symlog) scale."""
    v = values.dropna().to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    scale = ax.xaxis.get_transform()
    lo, hi = scale.transform(np.array([v.min(), v.max()]))
    pad = 0.03 * (hi - lo)
    ax.set_xlim(*scale.inverted().transform(np.array([lo - pad, hi + pad])))


def curve(runs: pd.DataFrame, keys: list[str], x: str, panels: list[tuple[str, str]], *, title: str) -> Drawn | None:
    """Lines of each figure in ``panels`` against ``x`` (mean, 95% t-band over seeds), one line per setting of
    the other keys; settings without ``x`` (e.g. no DP on an epsilon axis) are dashed horizontal references.
    Facets (rows of panels) split settings when more than 6 lines would share a panel.
    """
    panels = [(y, label) for y, label in panels if y in runs and runs[y].notna().any()]
    if not panels:
        return None
    others = [k for k in keys if k != x]
    table = summarise(runs, [x, *others])
    table = table[table[[y for y, _ in panels]].notna().any(axis=1)]  # settings that measured none of the panels
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
    plt = pyplot()
    fig, axes = plt.subplots(len(facet_values), len(panels), figsize=(5.2 * len(panels), 3.4 * len(facet_values)),
                             squeeze=False)
    line_ids = table.groupby(lines, dropna=False, sort=False).size().index.tolist() if lines else [None]
    names = series_names([_values(line) for line in line_ids], lines) if lines else []
    rest = [k for k in others if k not in lines]
    key_names = _key_names(rest)
    refs = table[table["_x"].isna()]
    ref_names = series_names([tuple(r[k] for k in [*lines, *rest]) for _, r in refs.iterrows()], [*lines, *rest]) \
        if len(refs) else []
    ref_name = dict(zip(refs.index, ref_names))
    log_x = _spans_decades(table["_x"], zeros=True)
    for r, facet in enumerate(facet_values):
        sub = table[_where(table, facets, facet) | table["_x"].isna()] if facets else table
        for c, (y, label) in enumerate(panels):
            ax = axes[r][c]
            drawn_refs = 0
            shown: list[pd.Series] = []
            for i, line in enumerate(line_ids):
                part = sub[_where(sub, lines, line)] if lines else sub
                look = style(i)
                pts = part[part["_x"].notna()].sort_values("_x")
                if lines:
                    name = names[i]
                else:  # one line: name it by what its points share (e.g. defense=dpsgd)
                    name = ", ".join(f"{key_names[k]}={value_text(pts[k].iloc[0])}" for k in rest
                                     if token(pts[k].iloc[0]) != token(None)) if len(pts) and rest else ""
                    name = name or "all runs"
                if pts[y].notna().any():
                    ax.plot(pts["_x"], pts[y], label=name, ms=5, **look)
                    ax.fill_between(pts["_x"], pts[f"{y}_lo"], pts[f"{y}_hi"], color=look["color"], alpha=0.15, lw=0)
                    shown.append(pts[y])
                    companion, what = COMPANIONS.get(y, (None, ""))
                    if companion is not None and companion.key in pts and pts[companion.key].notna().any():
                        finite = pts[companion.key].where(np.isfinite(pts[companion.key].astype(float)))
                        ax.plot(pts["_x"], finite, ":", color=look["color"], lw=1.2,
                                label=what if what not in ax.get_legend_handles_labels()[1] else None)
                        shown.append(finite)
                for index, ref in part[part["_x"].isna()].iterrows():
                    if not math.isnan(ref[y]):
                        ref_label = f"without {KEY_LABELS.get(x, x)}: {ref_name.get(index, 'all runs')}"
                        dash = REFERENCE_DASHES[drawn_refs % len(REFERENCE_DASHES)]
                        drawn_refs += 1
                        ax.axhline(ref[y], color=look["color"], ls=dash, lw=1.2, label=ref_label)
                        if not math.isnan(ref[f"{y}_lo"]):
                            ax.axhspan(ref[f"{y}_lo"], ref[f"{y}_hi"], color=look["color"], alpha=0.05, lw=0)
            if y == PSNR_GAIN.key:
                ax.axhline(0.0, color="k", ls=":", lw=1, label="chance")
            if log_x:
                _log_scale(ax, "x", table["_x"])
                _fit_x(ax, table["_x"])
            if shown and y in COMPANIONS and _spans_decades(pd.concat(shown), ratio=1000, zeros=True):
                _log_scale(ax, "y", pd.concat(shown))  # a claim of 10^6 beside a bound of 2
                ax.set_ylabel(label.split(" (")[0] + ", log scale")
            _ticks_at(ax, table["_x"], log=log_x)
            ax.set_xlabel(KEY_LABELS.get(x, x) + (", log scale" if log_x else ""))
            if not ax.get_ylabel():
                ax.set_ylabel(label)
            head = ", ".join(f"{k}={value_text(v)}" for k, v in zip(facets, _values(facet)))
            ax.set_title(head if facets else "", fontsize=9)
            ax.grid(alpha=0.3)
    handles, names = [], []
    for ax in axes.flat:  # every panel's entries once (a companion may be drawn in one panel only)
        for handle, name in zip(*ax.get_legend_handles_labels()):
            if name not in names:
                handles.append(handle)
                names.append(name)
    fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(3, max(1, len(names))),
               fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return _drawn(fig)


def bytes_figure(runs: pd.DataFrame, keys: list[str]) -> Drawn | None:
    """Uplink and downlink per setting (bars), and leakage and accuracy against total bytes (points, t-intervals);
    one shared legend names the settings."""
    train = training_keys(keys)
    table = summarise(_one_per_training(runs, keys), train) if train else None
    if table is None or table[TOTAL_BYTES.key].dropna().nunique() < 2:
        return None
    leak = summarise(runs, keys)
    plt = pyplot()
    fig = plt.figure(figsize=(13, 4.5 + 0.28 * len(table)))
    grid = fig.add_gridspec(2, 2, height_ratios=[0.28 * len(table) + 0.8, 3.2])
    bars = fig.add_subplot(grid[0, :])
    order = table.sort_values(TOTAL_BYTES.key)
    settings = [tuple(r[k] for k in train) for _, r in order.iterrows()]
    labels = series_names(settings, train)
    name_of = {tuple(token(v) for v in setting): label for setting, label in zip(settings, labels)}
    bars.barh(labels, order[UPLINK_BYTES.key] / 1e6, label="uplink")
    bars.barh(labels, order[DOWNLINK_BYTES.key] / 1e6, left=order[UPLINK_BYTES.key] / 1e6, label="downlink")
    bars.set_xlabel("bytes sent in training (MB, 10^6 B)")
    bars.legend(fontsize=8, loc="lower right")
    bars.tick_params(axis="y", labelsize=7)
    looks = {label: style(i) for i, label in enumerate(labels)}
    utility = utility_figure(table)
    for c, (source, y, label) in enumerate([(leak, PSNR_GAIN.key, PSNR_GAIN.label),
                                            (table, utility.key, utility.label)]):
        ax = fig.add_subplot(grid[1, c])
        for _, r in source.sort_values(TOTAL_BYTES.key).iterrows():
            name = name_of.get(tuple(token(r[k]) for k in train), "")
            if math.isnan(r[y]) or name not in looks:
                continue
            err = None if math.isnan(r[f"{y}_lo"]) else [[r[y] - r[f"{y}_lo"]], [r[f"{y}_hi"] - r[y]]]
            look = looks[name]
            ax.errorbar([r[TOTAL_BYTES.key] / 1e6], [r[y]], yerr=err, fmt=look["marker"], color=look["color"],
                        capsize=3, label=name)
        if _spans_decades(source[TOTAL_BYTES.key]):
            ax.set_xscale("log")
        if y == PSNR_GAIN.key:
            _failed_band(ax)
        ax.set_xlabel("total bytes, up + down (MB)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    handles, names = fig.axes[-1].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=7, frameon=False)
    fig.suptitle("What each setting sends, and what it costs in leakage and accuracy (mean, 95% t-interval)",
                 fontsize=11)
    fig.tight_layout()
    return _drawn(fig)


FAILED = "attack failed (gain <= 0 dB): no leak measured"


def _failed_band(ax: Any) -> None:
    """Shade gains at or below zero as failed attacks (the Pareto front ranks them all as no leak)."""
    ax.axhline(0.0, color="k", ls=":", lw=1)
    bottom, top = ax.get_ylim()
    if bottom < 0:
        ax.axhspan(bottom, 0.0, color="0.85", alpha=0.5, zorder=0)
        ax.text(0.01, 0.02, FAILED, transform=ax.transAxes, fontsize=8, color="0.3", va="bottom")
        ax.set_ylim(bottom, top)


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


def _number_points(ax: Any, spots: dict[tuple[float, float], list[int]]) -> None:
    """Label each point with its setting numbers (``7 = 8`` for coincident settings); points closer than 5 % of
    the axes to each other get their labels fanned out beside them on leader lines, so none hides another."""
    fig = ax.figure
    fig.canvas.draw()
    to_axes = ax.transData + ax.transAxes.inverted()
    where = {spot: to_axes.transform(spot) for spot in spots}
    groups: list[list[tuple[float, float]]] = []
    for spot in sorted(spots, key=lambda s: (where[s][1], where[s][0])):
        near = next((g for g in groups if any(np.hypot(*(where[spot] - where[o])) < 0.05 for o in g)), None)
        if near is None:
            groups.append([spot])
        else:
            near.append(spot)
    for group in groups:
        for k, spot in enumerate(sorted(group, key=lambda s: -where[s][1])):
            text = " = ".join(map(str, spots[spot]))
            if len(group) == 1:
                ax.annotate(text, spot, textcoords="offset points", xytext=(7, 6), fontsize=9, zorder=4)
                continue
            left = where[spot][0] > 0.6  # fan out to the side with room
            offset = (-70 if left else 70, 16 * (len(group) / 2 - k))
            ax.annotate(text, spot, textcoords="offset points", xytext=offset, fontsize=9, zorder=4,
                        ha="right" if left else "left", va="center",
                        arrowprops={"arrowstyle": "-", "color": "0.4", "lw": 0.7})


def pareto_figure(table: pd.DataFrame, keys: list[str]) -> Drawn | None:
    """Leakage (PSNR gain over chance) against known-client accuracy, coloured by total bytes: every setting a
    numbered point named in the legend, coincident settings one point with all their numbers, the front circled.

    A setting that sends nothing (local-only: 0 bytes, no attack) leaks nothing on the wire: it is drawn at a gain
    of 0 and says so in the legend."""
    utility = utility_figure(table)
    silent = (table[TOTAL_BYTES.key] == 0) & table[PSNR_GAIN.key].isna()
    table = table.assign(**{PSNR_GAIN.key: table[PSNR_GAIN.key].mask(silent, 0.0), "_silent": silent})
    data = table.dropna(subset=[PSNR_GAIN.key, utility.key, TOTAL_BYTES.key]).reset_index(drop=True)
    if data.empty:
        return None
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.lines import Line2D

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(12, 7))
    front = pareto_front(data, utility=utility.key)
    megabytes = data[TOTAL_BYTES.key] / 1e6
    lo, hi = float(megabytes.min()), float(megabytes.max())
    title = "Leakage vs accuracy vs bytes: each setting numbered; settings on the Pareto front circled"
    if hi > lo:
        norm = LogNorm(lo, hi) if _spans_decades(megabytes) else Normalize(lo, hi)
        points = ax.scatter(data[utility.key], data[PSNR_GAIN.key], c=megabytes, norm=norm, cmap="viridis",
                            s=70, zorder=2, edgecolors="white", linewidths=0.5)
        colourbar = fig.colorbar(points, ax=ax, label="total bytes, up + down (MB)")
        colourbar.formatter.set_useOffset(False)
        colourbar.update_ticks()
    else:
        ax.scatter(data[utility.key], data[PSNR_GAIN.key], s=70, zorder=2)
        title += f"\n(every setting sends {lo * 1e6:,.0f} B)"
    names = series_names([tuple(r[k] for k in keys) for _, r in data.iterrows()], keys) if keys else \
        ["all runs"] * len(data)
    spots: dict[tuple[float, float], list[int]] = {}
    for i, r in data.iterrows():
        spots.setdefault((round(float(r[utility.key]), 6), round(float(r[PSNR_GAIN.key]), 6)), []).append(int(i) + 1)
    on = data[front]
    ax.scatter(on[utility.key], on[PSNR_GAIN.key], facecolors="none", edgecolors="k", s=240, linewidths=1.5,
               zorder=3)
    ax.margins(x=0.08, y=0.12)
    _failed_band(ax)
    _number_points(ax, spots)
    ax.set_xlabel(utility.label)
    ax.set_ylabel("PSNR gain over chance (dB; lower is more private)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    entries = []
    for i, name in enumerate(names):
        same = next(n for n in spots.values() if i + 1 in n)
        also = f" (same point as {', '.join(map(str, [n for n in same if n != i + 1]))})" if len(same) > 1 else ""
        nothing = " (sends nothing, so no attack, drawn at 0)" if bool(data["_silent"].iloc[i]) else ""
        entries.append(f"{i + 1}: {name}{nothing}{' [front]' if bool(front.iloc[i]) else ''}{also}")
    handles = [Line2D([], [], linestyle="none") for _ in entries]
    fig.legend(handles, entries, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2 if len(entries) > 6 else 1,
               fontsize=8, frameon=False, handlelength=0, handletextpad=0)
    fig.tight_layout()
    return _drawn(fig)


def write_plots(runs: pd.DataFrame, table: pd.DataFrame, out: Path) -> dict[str, tuple[Path, Drawn]]:
    """Write every figure that the runs support as PNG under ``out``; return each by title with what it shows."""
    keys = list(table.attrs.get("keys", []))
    figures: dict[str, tuple[str, Drawn | None]] = {}
    for x in swept_keys(runs, keys):
        name = x.replace(".", "_")
        figures[f"Leakage vs {x}"] = (f"leakage_vs_{name}.png",
                                      curve(runs, keys, x, LEAKAGE, title=f"Leakage vs {KEY_LABELS.get(x, x)}"))
        train = training_keys(keys)
        if x in train:
            figures[f"Utility vs {x}"] = (f"utility_vs_{name}.png", curve(
                _one_per_training(runs, keys), train, x, UTILITY, title=f"Accuracy vs {KEY_LABELS.get(x, x)}"))
        figures[f"Audit vs {x}"] = (f"audit_vs_{name}.png", curve(
            runs, keys, x, AUDIT, title=f"Membership and empirical epsilon vs {KEY_LABELS.get(x, x)}"))
    figures["Bytes"] = ("bytes.png", bytes_figure(runs, keys))
    figures["Pareto"] = ("pareto.png", pareto_figure(table, keys))
    paths = {}
    for title, (file, drawn) in figures.items():
        if drawn is not None:
            paths[title] = (Path(out) / file, drawn)
            atomic_write_bytes(paths[title][0], drawn.png)
    return paths
