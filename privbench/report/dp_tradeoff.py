"""The client-level DP trade-off: membership (participation) AUC against accuracy, a line per protocol through its
settings from the strongest noise to none, each point marked with its claimed client-level epsilon (and what the
canary clients measured of it), error bars the 95 % t-intervals over seeds."""
from __future__ import annotations

import math

import pandas as pd

from privbench.figures import (
    CLIENT_EPSILON,
    CLIENT_EPSILON_CANARY,
    DOWNLOADED_ACCURACY,
    MIA_AUC,
    MIA_AUC_INFORMED,
    Figure,
)
from privbench.report.draw import Drawn, drawn, pyplot, style
from privbench.report.naming import Codes, series_names
from privbench.report.pareto import utility_figure

#: The dotted line of the test's AUC knowing only each client's classes (its highest over the settings).
CLASS_PRIOR = "class prior"
#: What a point without a client-level epsilon is: no DP-FedAvg at all.
NO_DP = "no DP"


def applies(table: pd.DataFrame) -> bool:
    """Whether the runs compare client-level epsilons on a membership test: some rows claim one, and every row has
    a membership AUC and an accuracy."""
    if CLIENT_EPSILON.key not in table or MIA_AUC.key not in table or table[CLIENT_EPSILON.key].isna().all():
        return False
    return bool(table[MIA_AUC.key].notna().all() and len(table) >= 2)


def epsilon_label(row: pd.Series) -> str:
    """A point's mark: the claimed epsilon (``inf``: clipping without noise), the canary clients' measure beside it.

    Example:
        >>> epsilon_label(pd.Series({"client_epsilon": 3.9992, "client_epsilon_canary": 3.72}))
        'eps 4 (canaries 3.7)'
    """
    claimed = row.get(CLIENT_EPSILON.key)
    if claimed is None or (isinstance(claimed, float) and math.isnan(claimed)):
        return NO_DP
    text = "eps inf" if math.isinf(float(claimed)) else f"eps {float(claimed):.2g}"  # a calibrated 63.99 is 64
    measured = row.get(CLIENT_EPSILON_CANARY.key)
    if measured is not None and not (isinstance(measured, float) and math.isnan(measured)):
        text += f" (canaries {float(measured):.2g})"
    return text


def _accuracy(table: pd.DataFrame) -> Figure:
    """Downloaded-model accuracy where every row has it (DP-FedAvg's noise lands on the released model), else the
    report's usual utility figure."""
    if DOWNLOADED_ACCURACY.key in table and table[DOWNLOADED_ACCURACY.key].notna().all():
        return DOWNLOADED_ACCURACY
    return utility_figure(table)


def _spread(rows: pd.DataFrame, key: str) -> list[pd.Series]:
    """The error bar of ``key``: down to its interval's low end and up to its high end (0 for one run)."""
    mid = rows[key]
    low, high = rows.get(f"{key}_lo", mid), rows.get(f"{key}_hi", mid)
    return [(mid - low).clip(lower=0).fillna(0), (high - mid).clip(lower=0).fillna(0)]


def dp_tradeoff_figure(table: pd.DataFrame, keys: list[str]) -> Drawn | None:
    """The trade-off: one line per setting of the keys outside ``aggregation`` (the protocol), its points ordered
    by accuracy and marked with their epsilon; chance (0.5) and the class-only prior's AUC dotted."""
    if not applies(table):
        return None
    accuracy = _accuracy(table)
    if accuracy.key not in table:
        return None
    table = table.dropna(subset=[accuracy.key])
    outside = [k for k in keys if not k.startswith("aggregation.") and k != "aggregation"]
    groups = list(table.groupby(outside, dropna=False, sort=False)) if outside else [((), table)]
    settings = [g if isinstance(g, tuple) else (g,) for g, _ in groups]
    codes = Codes()
    full = series_names(settings, outside) if outside else ["all runs"]
    names = [codes.short(n, n) for n in full]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.6), layout="constrained")
    for i, (name, (_, rows)) in enumerate(zip(names, groups)):
        rows = rows.sort_values(accuracy.key)
        look = style(i)
        x, y = rows[accuracy.key], rows[MIA_AUC.key]
        ax.errorbar(x, y, xerr=_spread(rows, accuracy.key), yerr=_spread(rows, MIA_AUC.key), label=name,
                    color=look["color"], marker=look["marker"], linestyle=look["linestyle"], capsize=3, ms=6)
        for (_, row), xi, yi in zip(rows.iterrows(), x, y):
            ax.annotate(epsilon_label(row), (float(xi), float(yi)), textcoords="offset points", fontsize=7,
                        xytext=(6, 6) if i % 2 == 0 else (6, -12), color=look["color"])  # series apart
    ax.axhline(0.5, color="0.4", linestyle=":", linewidth=1, label="chance")
    if MIA_AUC_INFORMED.key in table and table[MIA_AUC_INFORMED.key].notna().any():
        ax.axhline(float(table[MIA_AUC_INFORMED.key].max()), color="0.6", linestyle=(0, (2, 2)), linewidth=1,
                   label=CLASS_PRIOR)
    ax.set_xlabel(accuracy.label)
    ax.set_ylabel(f"{MIA_AUC.label} (lower is more private)")
    ax.set_title("Privacy vs accuracy under client-level DP: each point's claimed epsilon (canary clients' measure)",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.margins(x=0.15, y=0.12)
    ax.legend(fontsize=8, loc="best")
    return drawn(fig, panels=[names], key=codes.key)
