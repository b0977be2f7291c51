"""Which figures a report draws, chosen from what varies between its settings, and writing them.

The rule:

- a **curve** (``leakage_vs_<key>.png``; ``utility_vs_<key>.png`` for a key that changes the training;
  ``audit_vs_<key>.png`` for a DP audit) for each numeric key along which some setting of the other keys has at
  least 3 values; settings with one value of it are left to the table and the strip;
- a **Pareto plot** (``pareto.png``) only when accuracy trades off: at least 3 settings with a PSNR gain, an
  accuracy and bytes, and at least 2 distinct points on their front; it labels the front, not every point;
- a **strip plot** (``leakage.png``: each setting's PSNR gain over chance, every seed a point, the mean with its
  95% t-interval) whenever a setting measured a gain and the curves and the Pareto plot do not already carry the
  comparison: when no key is swept (only categorical settings vary) or accuracy does not trade off (a 2-setting
  sweep gets a strip, never a two-point Pareto plot);
- **bytes** (``bytes.png``: uplink and downlink per training setting) when settings send different bytes.

Every figure keeps at most ``MAX_SERIES`` (6) settings in a panel (more become small multiples, faceted by the
keys that split them best) and names settings in at most 30 characters (a longer name becomes a code ``S1``,
``S2``, ... that the page's caption spells out).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from privbench.figures import AUDIT_PLOTS, LEAKAGE_PLOTS, PSNR_GAIN, UTILITY_PLOTS
from privbench.io import atomic_write_bytes
from privbench.report import dp_tradeoff
from privbench.report.curves import KEY_LABELS, curve, swept_keys
from privbench.report.draw import Drawn, pyplot
from privbench.report.grouping import token, training_keys
from privbench.report.pareto import pareto_figure, trades_off
from privbench.report.strips import bytes_figure, strip_figure

__all__ = ["Choice", "Drawn", "choose", "one_per_training", "pyplot", "write_plots"]

LEAKAGE = [(f.key, f.label) for f in LEAKAGE_PLOTS]
UTILITY = [(f.key, f.label) for f in UTILITY_PLOTS]
AUDIT = [(f.key, f.label) for f in AUDIT_PLOTS]
#: The files ``write_plots`` writes (an earlier report's that the runs no longer get are removed).
WRITTEN = ("leakage_vs_*.png", "utility_vs_*.png", "audit_vs_*.png", "leakage.png", "bytes.png", "pareto.png",
           "dp_tradeoff.png")


def one_per_training(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One run per training setting and seed (utility, bytes and epsilon belong to the training, not to each attack
    on it, so averaging every attack's copy would count one training several times)."""
    return runs.loc[runs[[*training_keys(keys), "seed"]].map(token).drop_duplicates().index]


@dataclass(frozen=True)
class Choice:
    """The figures a report draws: a curve per key in ``curves``, the Pareto plot, the strip plot."""

    curves: list[str]
    pareto: bool
    strip: bool


def choose(runs: pd.DataFrame, table: pd.DataFrame) -> Choice:
    """Which figures the runs get, by the module's rule."""
    keys = list(table.attrs.get("keys", []))
    curves = swept_keys(runs, keys)
    pareto = trades_off(table)
    gain = PSNR_GAIN.key in table and bool(table[PSNR_GAIN.key].notna().any())
    return Choice(curves, pareto, gain and not (curves and pareto))


def write_plots(runs: pd.DataFrame, table: pd.DataFrame, out: Path) -> dict[str, tuple[Path, Drawn]]:
    """Write every figure ``choose`` picks as PNG under ``out``; return each by title with what it shows."""
    keys = list(table.attrs.get("keys", []))
    chosen = choose(runs, table)
    figures: dict[str, tuple[str, Drawn | None]] = {}
    train = training_keys(keys)
    for x in chosen.curves:
        name, label = x.replace(".", "_"), KEY_LABELS.get(x, x)
        figures[f"Leakage vs {x}"] = (f"leakage_vs_{name}.png", curve(runs, keys, x, LEAKAGE,
                                                                      title=f"Leakage vs {label}"))
        if x in train:
            figures[f"Utility vs {x}"] = (f"utility_vs_{name}.png", curve(
                one_per_training(runs, keys), train, x, UTILITY, title=f"Accuracy vs {label}"))
        figures[f"Audit vs {x}"] = (f"audit_vs_{name}.png", curve(
            runs, keys, x, AUDIT, title=f"Membership and empirical epsilon vs {label}"))
    if chosen.strip:
        figures["Leakage per setting"] = ("leakage.png", strip_figure(runs, table, keys))
    figures["Bytes"] = ("bytes.png", bytes_figure(runs, keys, train))
    if chosen.pareto:
        figures["Pareto"] = ("pareto.png", pareto_figure(table, keys))
    if dp_tradeoff.applies(table):
        figures["Client-level DP trade-off"] = ("dp_tradeoff.png", dp_tradeoff.dp_tradeoff_figure(table, keys))
    paths = {}
    for title, (file, drawn) in figures.items():
        if drawn is not None:
            paths[title] = (Path(out) / file, drawn)
            atomic_write_bytes(paths[title][0], drawn.png)
    written = {path for path, _ in paths.values()}
    for pattern in WRITTEN:  # an earlier report's figures that these runs no longer get
        for stale in sorted(Path(out).glob(pattern)):
            if stale not in written:
                stale.unlink()
    return paths
