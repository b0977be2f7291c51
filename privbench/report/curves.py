"""Curves against a swept numeric setting: one line per setting of the other keys, small multiples of at most
``MAX_SERIES`` lines, settings without the swept key as horizontal references."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from privbench.figures import COMPANIONS, PSNR_GAIN
from privbench.report.draw import (
    REFERENCE_DASHES,
    Drawn,
    drawn,
    fit_x,
    log_scale,
    pyplot,
    spans_decades,
    style,
    ticks_at,
)
from privbench.report.grouping import token
from privbench.report.naming import Codes, facet_title, facets, key_names, series_names, setting_text
from privbench.report.table import summarise

#: Axis labels of swept config keys (others are shown by their key).
KEY_LABELS = {"defense.target_epsilon": "target epsilon of DP-SGD (delta 1e-5)",
              "victim.num_images": "victim batch (images)", "victim.round": "victim round",
              "fl.gene.gamma": "gamma (a count of gene layers, or a fraction of the layers or the size)",
              "defense.sigma": "noise sigma (gradient units)",
              "defense.noise_multiplier": "DP-SGD noise multiplier sigma (clip norm units)",
              "defense.p": "pruned fraction"}


def companion_name(what: str) -> str:
    """A companion's legend entry, short (the caption's remark says what it is in full).

    Example:
        >>> companion_name("f-DP bound of each line's audited round (dotted)")
        'f-DP bound (dotted)'
    """
    return what.split(" of each line")[0] + " (dotted)"


def _numeric(column: pd.Series) -> bool:
    return bool(column.map(lambda v: isinstance(v, (int, float, np.number)) and not isinstance(v, bool)).all())


def swept_keys(runs: pd.DataFrame, keys: list[str]) -> list[str]:
    """Numeric grouping keys along which some setting of the other keys has at least 3 values: a line of at least
    3 points (a key with 3 values that each belong to another setting is no curve)."""
    out = []
    for key in keys:
        values = pd.to_numeric(runs[key], errors="coerce")
        if not _numeric(runs[key]) or values.dropna().nunique() < 3:
            continue
        others = [k for k in keys if k != key]
        frame = runs[values.notna()]
        along = frame.groupby([frame[k].map(token) for k in others])[key].nunique() if others else \
            pd.Series([frame[key].nunique()])
        if along.max() >= 3:
            out.append(key)
    return out


def _series(table: pd.DataFrame, others: list[str]) -> tuple[pd.DataFrame, int]:
    """One row per series: a line (a setting of ``others`` with 2 or more x values; its table rows in ``_rows``)
    or a reference (a row without x); and how many settings had one x value (left to the table)."""
    items: list[dict[str, Any]] = []
    swept = table[table["_x"].notna()]
    alone = 0
    parts = swept.groupby([swept[k].map(token) for k in others], sort=False) if others else [(None, swept)]
    for _, part in parts:
        if part["_x"].nunique() < 2:
            alone += 1
            continue
        items.append({**{k: part[k].iloc[0] for k in others}, "_ref": False, "_rows": list(part.index)})
    for index, row in table[table["_x"].isna()].iterrows():
        items.append({**{k: row[k] for k in others}, "_ref": True, "_rows": [index]})
    return pd.DataFrame(items, columns=[*others, "_ref", "_rows"]), alone


def curve(runs: pd.DataFrame, keys: list[str], x: str, panels: list[tuple[str, str]], *, title: str) -> Drawn | None:
    """Each figure in ``panels`` (a column) against ``x`` (mean, 95% t-band over seeds), a line per setting of the
    other keys; settings without ``x`` (e.g. no DP on an epsilon axis) are dashed horizontal references. Rows of
    panels facet the settings so that no panel holds more than ``MAX_SERIES``; each row has its own legend."""
    panels = [(y, label) for y, label in panels if y in runs and runs[y].notna().any()]
    if not panels:
        return None
    others = [k for k in keys if k != x]
    table = summarise(runs, [x, *others])
    table = table[table[[y for y, _ in panels]].notna().any(axis=1)]
    table["_x"] = pd.to_numeric(table[x], errors="coerce")
    items, alone = _series(table, others)
    if items.empty or not (~items["_ref"]).any():
        return None
    lines, refs = items[~items["_ref"]], items[items["_ref"]]
    shared = [k for k in others if refs.empty or set(lines[k].map(token)) & set(refs[k].map(token))]
    by, rows = facets(items, others, candidates=shared)  # never a key that parts the references from the lines
    x_name = key_names([x, *others])[x]
    plt = pyplot()
    fig, axes = plt.subplots(len(rows), len(panels), figsize=(4.6 * len(panels) + 2.6, 3.1 * len(rows)),
                             squeeze=False, layout="constrained")
    codes, per_panel = Codes(), []
    companions: dict[str, str] = {}
    log_x = spans_decades(table["_x"], zeros=True)
    heads = [facet_title(items.iloc[r[0]], by) for r in rows]
    heads = [f"{h} ({heads[:i].count(h) + 1}/{heads.count(h)})" if heads.count(h) > 1 else h
             for i, h in enumerate(heads)]
    for r, positions in enumerate(rows):
        mine = items.iloc[positions]
        rest = [k for k in others if k not in by]
        names = series_names([tuple(row[k] for k in rest) for _, row in mine.iterrows()], rest) if rest else \
            ["all runs"] * len(mine)
        shorts = []
        lines = {n for n, ref in zip(names, mine["_ref"]) if not ref}
        for (_, item), name in zip(mine.iterrows(), names):
            full = setting_text({**{k: item[k] for k in others}, **({x: None} if item["_ref"] else {})})
            clash = item["_ref"] and name in lines  # a reference named as a line: it says it has no x
            shorts.append(codes.short(f"{name}, no {x_name}" if clash else name, full))
        for c, (y, label) in enumerate(panels):
            per_panel.append(_panel(axes[r][c], table, mine, shorts, y, label, x=x, log_x=log_x, head=heads[r],
                                    companions=companions))
        _row_legend(axes[r])
    fig.suptitle(title, fontsize=11)
    remark = " ".join([f"{short}: {what}." for short, what in companions.items()]
                      + ([f"Dashed horizontal lines: settings without {x}."] if items["_ref"].any() else [])
                      + ([f"{alone} setting(s) with a single value of {x} are not drawn here (see the table)."]
                         if alone else []))
    return drawn(fig, panels=per_panel, key=codes.key, remark=remark)


def _panel(ax: Any, table: pd.DataFrame, mine: pd.DataFrame, shorts: list[str], y: str, label: str, *, x: str,
           log_x: bool, head: str, companions: dict[str, str]) -> list[str]:
    """One panel of ``curve``: figure ``y`` of each series in ``mine`` against ``x`` (a reference as a dashed line),
    with its companion bound where it has one (recorded in ``companions``); returns the series drawn."""
    shown: list[pd.Series] = []
    series: list[str] = []
    refs = 0
    for i, ((_, item), name) in enumerate(zip(mine.iterrows(), shorts)):
        pts = table.loc[item["_rows"]].sort_values("_x")
        if pts[y].isna().all():
            continue
        look = style(i)
        series.append(name)
        if item["_ref"]:
            ref = pts.iloc[0]
            ax.axhline(ref[y], color=look["color"], ls=REFERENCE_DASHES[refs % len(REFERENCE_DASHES)], lw=1.2,
                       label=name)
            refs += 1
            if not math.isnan(ref[f"{y}_lo"]):
                ax.axhspan(ref[f"{y}_lo"], ref[f"{y}_hi"], color=look["color"], alpha=0.05, lw=0)
            continue
        ax.plot(pts["_x"], pts[y], label=name, ms=5, **look)
        ax.fill_between(pts["_x"], pts[f"{y}_lo"], pts[f"{y}_hi"], color=look["color"], alpha=0.15, lw=0)
        shown.append(pts[y])
        companion, what = COMPANIONS.get(y, (None, ""))
        if companion is not None and companion.key in pts and pts[companion.key].notna().any():
            bound = pts[companion.key].where(np.isfinite(pts[companion.key].astype(float)))
            short = companion_name(what)
            ax.plot(pts["_x"], bound, ":", color=look["color"], lw=1.2,
                    label=short if short not in ax.get_legend_handles_labels()[1] else None)
            shown.append(bound)
            companions[short] = what
    if not series:
        ax.text(0.5, 0.5, "not measured for these settings", transform=ax.transAxes, ha="center",
                fontsize=8, color="0.4")
    if y == PSNR_GAIN.key:
        ax.axhline(0.0, color="k", ls=":", lw=1, label="chance")
    if log_x:
        log_scale(ax, "x", table["_x"])
        fit_x(ax, table["_x"])
    if shown and y in COMPANIONS and spans_decades(pd.concat(shown), ratio=1000, zeros=True):
        log_scale(ax, "y", pd.concat(shown))  # a claim of 10^6 beside a bound of 2
        ax.set_ylabel(label.split(" (")[0] + ", log scale")
    ticks_at(ax, table["_x"], log=log_x)
    ax.set_xlabel(KEY_LABELS.get(x, x) + (", log scale" if log_x else ""), fontsize=8)
    if not ax.get_ylabel():
        ax.set_ylabel(label)
    ax.set_title(head, fontsize=8)
    ax.grid(alpha=0.3)
    return series


def _row_legend(row: Any) -> None:
    """One legend for a row of panels, right of its last: each panel's entries once."""
    handles: list[Any] = []
    labels: list[str] = []
    for ax in row:  # each panel's entries once (a companion may be drawn in one panel only)
        for handle, name in zip(*ax.get_legend_handles_labels()):
            if name not in labels:
                handles.append(handle)
                labels.append(name)
    row[-1].legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
