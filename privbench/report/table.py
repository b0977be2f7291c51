"""The summary table: one row per (fl, payload, attack, defence setting), means over seeds."""
from __future__ import annotations

import math

import pandas as pd

KEYS = ["fl", "payload", "attack", "defense", "setting", "variant"]


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """Group runs by ``KEYS``; numeric columns are averaged (NaN stays NaN), ``runs`` counts them.

    ``psnr_best`` takes the best over seeds and ``lpips_best`` the lowest.
    """
    if runs.empty:
        return pd.DataFrame(columns=KEYS + ["runs"])
    numeric = [c for c in runs.columns if c not in KEYS + ["run_dir", "seed"]]
    agg = {c: "mean" for c in numeric}
    agg.update({"psnr_best": "max", "ssim_best": "max", "lpips_best": "min"})
    table = runs.groupby(KEYS, dropna=False).agg(agg)
    table["runs"] = runs.groupby(KEYS, dropna=False).size()
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
    """A GitHub-flavoured Markdown table; missing values are shown as ``–``."""
    head = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    body = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([head, rule, *body]) + "\n"
