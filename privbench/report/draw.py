"""What every report figure shares: the drawn record (PNG and its text), pyplot, series styles and axis helpers."""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from privbench.report.naming import value_text

MARKERS = "osD^v<>pX*"
#: Line dashes, one per ten series (each ten share the colour cycle), then per reference line.
DASHES = ["-", "--", "-.", ":"]
REFERENCE_DASHES = [(0, (6, 2)), (0, (2, 2)), (0, (6, 2, 1, 2)), (0, (1, 1)), (0, (8, 2, 1, 2, 1, 2))]
FAILED = "attack failed (gain <= 0 dB): no leak measured"
#: Legend entries that name no setting (marks, references, bars): never counted as a panel's series.
SEED, MEAN, FRONT, OTHERS = "each seed", "mean, 95% t-interval", "Pareto front (labelled)", "other settings"
AUXILIARY = ("chance", "class prior", "uplink", "downlink", SEED, MEAN, FRONT, OTHERS)


@dataclass
class Drawn:
    """A figure's PNG and the text drawn on it, so the page can show it and a test can read it: legend entries,
    axis labels and titles, x tick labels, point labels (``notes``), the series (settings) of each panel, and the
    ``key`` of the codes that stand for names too long for the figure (``S1 = payload=update, ...``), and a
    ``remark`` on what the figure leaves out."""

    png: bytes
    legend: list[str] = field(default_factory=list)
    axes: list[str] = field(default_factory=list)
    ticks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    panels: list[list[str]] = field(default_factory=list)
    key: list[str] = field(default_factory=list)
    remark: str = ""


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, with run-controlled text drawn as text."""
    import matplotlib

    matplotlib.use("Agg")
    # run-controlled strings (config values in legends and titles) are text, never mathtext ($...$) or TeX
    matplotlib.rcParams["text.parse_math"] = False
    matplotlib.rcParams["text.usetex"] = False
    import matplotlib.pyplot as plt

    return plt


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


def drawn(fig: Any, *, panels: list[list[str]], key: list[str] | None = None, remark: str = "") -> Drawn:
    """The PNG of ``fig``, every text on it, each panel's series and the codes' key; closes ``fig``."""
    legend: list[str] = []
    axes: list[str] = []
    ticks: list[str] = []
    notes: list[str] = []
    for box in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]:
        legend += [t.get_text() for t in box.get_texts() if t.get_text() not in legend]
    fig.canvas.draw()
    for ax in fig.axes:
        axes += [t for t in (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) if t]
        ticks += [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        notes += [t.get_text() for t in ax.texts if t.get_text()]
    if fig.get_suptitle():
        axes.append(fig.get_suptitle())
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    pyplot().close(fig)
    return Drawn(buffer.getvalue(), legend, axes, ticks, notes, panels, list(key or []), remark)


def finite(values: pd.Series) -> np.ndarray:
    """The finite values of ``values`` as floats."""
    v = pd.to_numeric(values, errors="coerce").dropna().to_numpy(dtype=float)
    return v[np.isfinite(v)]


def spans_decades(values: pd.Series, *, ratio: float = 10, zeros: bool = False) -> bool:
    """Whether the finite values are positive (or, with ``zeros``, zero: a symlog axis shows them) and their
    positive ones span ``ratio`` or more."""
    v = finite(values)
    positive = v[v > 0]
    allowed = (v >= 0).all() if zeros else (v > 0).all()
    return bool(allowed) and len(positive) > 1 and positive.max() / positive.min() >= ratio


def log_scale(ax: Any, axis: str, values: pd.Series) -> None:
    """Log scale on ``axis``, or symlog (linear below the smallest positive value) where a value is 0."""
    from matplotlib.ticker import FuncFormatter

    v = finite(values)
    scale = ax.set_xscale if axis == "x" else ax.set_yscale
    if (v > 0).all():
        scale("log")
    else:
        scale("symlog", linthresh=float(v[v > 0].min()), linscale=0.5)
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))


def fit_x(ax: Any, values: pd.Series) -> None:
    """The x range of the swept values with a 3 % margin in the axis' own (log or symlog) scale."""
    v = finite(values)
    scale = ax.xaxis.get_transform()
    lo, hi = scale.transform(np.array([v.min(), v.max()]))
    pad = 0.03 * (hi - lo) if hi > lo else 0.5
    ax.set_xlim(*scale.inverted().transform(np.array([lo - pad, hi + pad])))


def ticks_at(ax: Any, values: pd.Series, *, log: bool) -> None:
    """Ticks at the swept values, whole numbers shown as such (no 1.5 on a count axis, no bare 10^0 on a log one);
    more than 8 are slanted so they do not overlap."""
    from matplotlib.ticker import FixedLocator, NullLocator

    v = sorted(set(finite(values).tolist()))
    if not v or len(v) > 16:
        return
    ax.xaxis.set_major_locator(FixedLocator(v))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([value_text(x) if x.is_integer() else f"{x:.3g}" for x in v],
                       rotation=45 if len(v) > 8 else 0, ha="right" if len(v) > 8 else "center")
    if log:
        ax.minorticks_off()


def failed_band(ax: Any, axis: str = "y") -> None:
    """Shade gains at or below zero as failed attacks (the Pareto front ranks them all as no leak)."""
    line, span, limits = (ax.axhline, ax.axhspan, ax.get_ylim) if axis == "y" else (ax.axvline, ax.axvspan,
                                                                                  ax.get_xlim)
    line(0.0, color="k", ls=":", lw=1)
    low, high = limits()
    if low < 0:
        span(low, 0.0, color="0.85", alpha=0.5, zorder=0)
        ax.text(0.01, 0.02, FAILED, transform=ax.transAxes, fontsize=7, color="0.3", va="bottom")
        (ax.set_ylim if axis == "y" else ax.set_xlim)(low, high)
