"""The summary table: one row per setting (runs differing only in seed), mean, 95% Student-t interval and n."""
from __future__ import annotations

import html
import math

import numpy as np
import pandas as pd
from scipy import stats

from privbench.figures import FIGURES as FIGURES_SPEC
from privbench.figures import HEADLINES, LEAKS, MISSING, RUNS, TABLE, Figure
from privbench.metrics.image import PSNR_CEILING
from privbench.report.collect import FIGURES
from privbench.report.grouping import group_keys

#: How the report names each figure (units included); ``table.csv`` keeps the raw names.
LABELS = {**{f.key: f.label for f in FIGURES_SPEC}, LEAKS: "leaks", RUNS: "n"}
#: Figures shown in ``table.md`` and the HTML page, in order (all-missing columns are left out).
SHOWN = [str(f) for f in TABLE]
INTERVAL = "95% Student-t interval of the mean over seeds, clipped to the figure's range"
#: Figures that cannot leave [0, 1] (their interval bounds are clipped to it), and those that are >= 0.
UNIT_RANGE = {f.key for f in FIGURES_SPEC if f.bounds == "unit"}
NON_NEGATIVE = {f.key for f in FIGURES_SPEC if f.bounds == "nonnegative"}
#: Each bounded figure's range, ``(low, high)``, that its interval is clipped to.
RANGES = {f.key: {"unit": (0.0, 1.0), "signed_unit": (-1.0, 1.0), "signed_double": (-2.0, 2.0),
                  "nonnegative": (0.0, math.inf), "psnr": (0.0, PSNR_CEILING)}[f.bounds]
          for f in FIGURES_SPEC if f.bounds}
#: Fewer seeds than this and a row's interval is marked as coming from few seeds.
FEW_SEEDS = 3
#: Figures aggregated over seeds by the best run ("max" or "min"), not the mean.
BEST = {f.key: f.best for f in FIGURES_SPEC if f.best}


def t_interval(values: pd.Series, *, level: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean of ``values`` (NaN dropped); NaN bounds for fewer than 2 values.

    Example:
        >>> t_interval(pd.Series([40.0, 44.0]))  # 42 +- t(0.975, 1) * 2
        (16.587..., 67.412...)
    """
    x = values.dropna().to_numpy(dtype=float)
    x = x[np.isfinite(x)]
    if len(x) < 2:
        return math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))
    return float(x.mean()) - half, float(x.mean()) + half


#: The verdict of a headline figure at or below its chance level.
FAILED = "attack failed"
#: Per run: its family's headline figure beyond chance, in the direction of more leakage (``headline_gain``).
HEADLINE = "_headline_gain"


def headline_gain(runs: pd.DataFrame) -> pd.Series:
    """Per run, its family's headline figure minus its chance level (``figures.HEADLINES``: the first the run
    measured), signed so that above 0 means more leakage; NaN where it measured none.

    Example:
        >>> headline_gain(pd.DataFrame({"mia_auc": [0.7, float("nan")], "label_count_error": [float("nan"), 0.5],
        ...                             "label_count_error_chance": [float("nan"), 1.5]})).tolist()
        [0.19999999999999996, 1.0]
    """
    out = pd.Series(np.nan, index=runs.index, dtype=float)
    for figure, chance in HEADLINES:
        if figure.key not in runs or (isinstance(chance, Figure) and chance.key not in runs):
            continue
        level = runs[chance.key] if isinstance(chance, Figure) else chance
        gain = pd.to_numeric(runs[figure.key], errors="coerce") - level
        out = out.where(out.notna(), -gain if figure.leak == "lower" else gain)
    return out


def leaks(low: float, mean: float) -> str:
    """``yes`` when the headline gain over chance (the PSNR gain, the membership AUC over 0.5, ...: ``HEADLINES``)
    is above 0 with its whole interval, ``attack failed`` when its mean is at or below 0 (the attack learned
    nothing: no evidence either way, never a depth of privacy), ``unclear`` when the interval reaches 0; ``-``
    without an interval (one seed) or a headline.

    Example:
        >>> leaks(2.0, 5.0), leaks(-1.0, 4.0), leaks(-9.0, -4.0), leaks(math.nan, 5.0)
        ('yes', 'unclear', 'attack failed', '-')
    """
    if math.isnan(low) or math.isnan(mean):
        return MISSING
    if low > 0:
        return "yes"
    return FAILED if mean <= 0 else "unclear"


def summarise(runs: pd.DataFrame, keys: list[str] | None = None) -> pd.DataFrame:
    """One row per setting: runs grouped by ``keys`` (default: every config value that differs, see
    ``group_keys``). Each figure gets its mean and 95% Student-t interval over the group's runs
    (``<figure>_lo``, ``<figure>_hi``; NaN for one run; clipped to [0, 1] for ``UNIT_RANGE`` figures and to
    >= 0 for ``NON_NEGATIVE`` ones); ``psnr_best``/``ssim_best`` take the best run and
    ``lpips_best`` the lowest; ``runs`` is n; ``leaks`` says whether the PSNR gain over chance is above 0 with its
    interval. ``table.attrs["keys"]`` names the grouping keys.
    """
    keys = group_keys(runs) if keys is None else keys
    figures = [c for c in FIGURES if c in runs.columns]
    if runs.empty:
        return pd.DataFrame(columns=[*keys, RUNS, *figures])
    frame = runs.copy()
    frame["_all"] = "all"
    frame[HEADLINE] = headline_gain(frame)
    by = keys or ["_all"]
    groups = frame.groupby(by, dropna=False, sort=False)
    agg = {c: "mean" for c in figures}
    agg.update(BEST)
    table = groups.agg({c: f for c, f in agg.items() if c in figures})
    table.insert(0, RUNS, groups.size())
    intervals: dict[str, np.ndarray] = {}  # every interval column at once (inserting one by one fragments the frame)
    for name in figures:
        if name in BEST:
            continue
        bounds = groups[name].apply(t_interval)
        low, high = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
        if name in RANGES:
            floor, ceiling = RANGES[name]
            low, high = np.maximum(low, floor), np.minimum(high, ceiling)
        intervals[f"{name}_lo"], intervals[f"{name}_hi"] = low, high
    table = pd.concat([table, pd.DataFrame(intervals, index=table.index)], axis=1)
    gains = groups[HEADLINE].agg(["mean", t_interval])
    table[LEAKS] = [leaks(bounds[0], mean) for mean, bounds in zip(gains["mean"], gains["t_interval"])]
    table = table.reset_index()
    if not keys:
        table = table.drop(columns="_all")
    else:
        order = sorted(range(len(table)), key=lambda i: tuple(sort_key(table[k].iloc[i]) for k in keys))
        table = table.iloc[order].reset_index(drop=True)
    table.attrs["keys"] = keys
    return table


def sort_key(value: object) -> tuple[int, float, str]:
    """Sort missing values first, then numbers by value (1, 4, 16, not 1, 16, 4), then text."""
    if isinstance(value, float) and math.isnan(value):
        return 0, 0.0, ""
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return 1, float(value), ""
    return 2, 0.0, str(value)


def _cell(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return MISSING
        if math.isinf(value):
            return "inf"
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return str(value)


def cell(row: pd.Series, column: str) -> str:
    """``mean [lo, hi]`` for a figure with an interval (just the mean when the bounds are equal), else the value."""
    value = row[column]
    if f"{column}_lo" in row.index and not (isinstance(value, float) and math.isnan(value)):
        low, high = row[f"{column}_lo"], row[f"{column}_hi"]
        if not math.isnan(low) and _cell(low) != _cell(high):
            return f"{_cell(value)} [{_cell(low)}, {_cell(high)}]"
    return _cell(value)


def shown_columns(table: pd.DataFrame) -> list[str]:
    """The grouping keys, n and the ``SHOWN`` figures that have at least one value."""
    keys = list(table.attrs.get("keys", []))
    figures = [c for c in SHOWN if c in table.columns and not (table[c].isna().all() or (table[c] == "-").all())]
    return [*keys, RUNS, *figures]


def caption(table: pd.DataFrame) -> str:
    """What a row is: the keys it is grouped by, n and the interval."""
    keys = table.attrs.get("keys", [])
    named = ", ".join(f"`{k}`" for k in keys) or "nothing (every run has the same config but the seed)"
    text = (f"Runs grouped by every config value that differs between them except the seed: {named}. "
            f"n: runs (seeds) per row; `mean [lo, hi]`: {INTERVAL}; leaks: yes only when the PSNR gain over "
            f"chance is above 0 over its whole interval, 'attack failed' when its mean is at or below 0 (the attack "
            f"learned nothing, which is no evidence that the setting protects). Missing values: {MISSING}.")
    return text + few_seeds(table)


def few_seeds(table: pd.DataFrame) -> str:
    """A note when some rows rest on fewer than ``FEW_SEEDS`` seeds (their t-intervals are very wide), else ``""``."""
    if RUNS not in table or table.empty:
        return ""
    n = pd.to_numeric(table[RUNS], errors="coerce")
    few = int((n < FEW_SEEDS).sum())
    if not few:
        return ""
    return (f" Few seeds: {few} of {len(table)} rows rest on fewer than {FEW_SEEDS} runs (with n = 2 the "
            f"95% t-interval is the mean +- 12.7 standard errors, with n = 1 there is none); read them as "
            f"indicative, not as a finding.")


def _md(text: str) -> str:
    return html.escape(text, quote=False).replace("|", "\\|").replace("$", "\\$")


def to_markdown(table: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table after its caption; HTML, ``|`` and ``$`` in labels are escaped."""
    columns = shown_columns(table)
    head = "| " + " | ".join(_md(LABELS.get(c, c)) for c in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(_md(cell(row, c)) for c in columns) + " |" for _, row in table.iterrows()]
    return "\n".join([caption(table), "", head, rule, *body]) + "\n"


def to_html(table: pd.DataFrame) -> str:
    """The same table as an HTML ``<table>`` (escaped)."""
    columns = shown_columns(table)
    head = "".join(f"<th>{html.escape(LABELS.get(c, c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(row, c))}</td>" for c in columns) + "</tr>"
                   for _, row in table.iterrows())
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
