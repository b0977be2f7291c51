"""The summary table: one row per (fl, payload, attack, defence setting), means and 95% t-intervals over seeds."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

KEYS = ["fl", "payload", "attack", "defense", "setting", "variant"]
#: Figures given with a 95% interval over seeds (``<name>_lo``, ``<name>_hi``).
INTERVALS = ["psnr_mean", "psnr_gain", "ssim_mean", "lpips_mean", "accuracy", "personal_accuracy",
             "agnostic_accuracy_learngene", "epsilon"]


def t_interval(values: pd.Series, *, level: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean of ``values`` (NaN dropped); NaN bounds for fewer than 2 values.

    Example:
        >>> t_interval(pd.Series([40.0, 44.0]))  # 42 +- t(0.975, 1) * 2
        (16.587..., 67.412...)
    """
    x = values.dropna().to_numpy(dtype=float)
    if len(x) < 2:
        return math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))
    return float(x.mean()) - half, float(x.mean()) + half


def leaks(low: float, mean: float) -> str:
    """``yes`` when the PSNR gain over chance is above 0 with its whole interval, ``no`` when its mean is at
    or below 0, ``unclear`` when the interval reaches 0; ``-`` without an interval (one seed) or a gain.

    Example:
        >>> leaks(2.0, 5.0), leaks(-1.0, 4.0), leaks(-9.0, -4.0), leaks(math.nan, 5.0)
        ('yes', 'unclear', 'no', '-')
    """
    if math.isnan(low) or math.isnan(mean):
        return "-"
    if low > 0:
        return "yes"
    return "no" if mean <= 0 else "unclear"


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """Group runs by ``KEYS``; numeric columns are averaged (NaN stays NaN), ``runs`` counts them (n).

    ``psnr_best`` takes the best over seeds and ``lpips_best`` the lowest. Each figure in
    ``INTERVALS`` also gets its 95% Student-t interval over the group's runs (``_lo``, ``_hi``;
    NaN for one run), and ``leaks`` says whether the PSNR gain over chance is above 0 with it.
    """
    if runs.empty:
        return pd.DataFrame(columns=KEYS + ["runs"])
    numeric = [c for c in runs.columns if c not in KEYS + ["run_dir", "seed"]]
    agg = {c: "mean" for c in numeric}
    agg.update({k: v for k, v in {"psnr_best": "max", "ssim_best": "max", "lpips_best": "min"}.items() if k in agg})
    groups = runs.groupby(KEYS, dropna=False)
    table = groups.agg(agg)
    table["runs"] = groups.size()
    for name in [c for c in INTERVALS if c in runs.columns]:
        bounds = groups[name].apply(t_interval)
        table[f"{name}_lo"] = [b[0] for b in bounds]
        table[f"{name}_hi"] = [b[1] for b in bounds]
    if "psnr_gain" in runs.columns:
        table["leaks"] = [leaks(lo, m) for lo, m in zip(table["psnr_gain_lo"], table["psnr_gain"])]
    return table.reset_index()


def _cell(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        if math.isinf(value):
            return "inf"
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return str(value)


def to_markdown(table: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table; missing values are shown as ``–``.

    A figure with an interval is shown as ``mean [lo, hi]`` (95% Student-t over the row's
    ``runs``) and its ``_lo``/``_hi`` columns are folded into it.
    """
    folded = {c for name in INTERVALS for c in (f"{name}_lo", f"{name}_hi")}
    columns = [c for c in table.columns if c not in folded]

    def cell(row: pd.Series, column: str) -> str:
        value = row[column]
        if f"{column}_lo" in table.columns and not (isinstance(value, float) and math.isnan(value)):
            low, high = row[f"{column}_lo"], row[f"{column}_hi"]
            if not math.isnan(low):
                return f"{_cell(value)} [{_cell(low)}, {_cell(high)}]"
        return _cell(value)

    head = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(cell(row, c) for c in columns) + " |" for _, row in table.iterrows()]
    return "\n".join([head, rule, *body]) + "\n"
