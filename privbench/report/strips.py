"""Per-setting figures in small multiples of at most ``MAX_SERIES`` settings: the leakage gain of each setting with
every seed's point (a strip plot), and the bytes each training setting sends (bars)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from privbench.figures import DOWNLINK_BYTES, PSNR_GAIN, TOTAL_BYTES, UPLINK_BYTES
from privbench.report.draw import MEAN, SEED, Drawn, drawn, failed_band, pyplot
from privbench.report.gallery import members
from privbench.report.grouping import token
from privbench.report.naming import Codes, facet_title, facets, series_names, setting_text
from privbench.report.table import summarise


def _grid(count: int, height: float) -> tuple[Any, list[Any]]:
    """A figure of ``count`` panels in two columns (one when there is one), sharing x; spare cells hidden."""
    columns = 1 if count == 1 else 2
    rows = math.ceil(count / columns)
    fig, axes = pyplot().subplots(rows, columns, figsize=(7.5 if columns == 1 else 12.5, height * rows),
                                  squeeze=False, sharex=True, layout="constrained")
    flat = list(axes.flat)
    for ax in flat[count:]:
        ax.set_visible(False)
    if count % columns:  # the panel above the hidden cell is the last of its column: it shows the x ticks
        flat[count - columns].xaxis.set_tick_params(labelbottom=True)
    return fig, flat[:count]


def _labels(settings: pd.DataFrame, keys: list[str], by: list[str], codes: Codes) -> list[str]:
    """Each setting's name in its panel: the keys that differ within the panel (the facet keys are its title)."""
    rest = [k for k in keys if k not in by]
    names = series_names([tuple(r[k] for k in rest) for _, r in settings.iterrows()], rest) if rest else \
        ["all runs"] * len(settings)
    return [codes.short(n, setting_text({k: r[k] for k in keys})) for n, (_, r) in zip(names, settings.iterrows())]


def _panels(settings: pd.DataFrame, keys: list[str]) -> tuple[Any, Codes, list[list[str]], list[tuple[Any, pd.DataFrame]]]:
    """A figure of one horizontal panel per facet of ``settings``, each titled and its rows named: the figure, its
    name codes, each panel's names, and each panel's axes with its settings."""
    by, groups = facets(settings, keys)
    fig, axes = _grid(len(groups), 0.42 * max(map(len, groups)) + 1.3)
    codes, per_panel, panels = Codes(), [], []
    for ax, positions in zip(axes, groups):
        mine = settings.iloc[positions]
        labels = _labels(mine, keys, by, codes)
        per_panel.append(labels)
        ax.set_yticks(range(len(mine)), labels, fontsize=8)
        ax.set_ylim(len(mine) - 0.5, -0.5)
        ax.set_title(facet_title(mine.iloc[0], by), fontsize=8)
        ax.grid(alpha=0.3, axis="x")
        panels.append((ax, mine))
    return fig, codes, per_panel, panels


def strip_figure(runs: pd.DataFrame, table: pd.DataFrame, keys: list[str]) -> Drawn | None:
    """The PSNR gain over chance of each setting: every seed's run a point, the mean with its 95% t-interval; the
    settings in panels of at most ``MAX_SERIES``, faceted by the keys that split them best."""
    if PSNR_GAIN.key not in table or table[PSNR_GAIN.key].isna().all():
        return None
    settings = table[table[PSNR_GAIN.key].notna()].reset_index(drop=True)
    fig, codes, per_panel, panels = _panels(settings, keys)
    axes = [ax for ax, _ in panels]
    for ax, mine in panels:
        for j, (_, row) in enumerate(mine.iterrows()):
            seeds = members(runs, keys, row).sort_values("seed")[PSNR_GAIN.key].dropna().to_numpy(dtype=float)
            spread = np.linspace(-0.15, 0.15, len(seeds)) if len(seeds) > 1 else np.zeros(len(seeds))
            ax.scatter(seeds, j + spread, s=16, color="C0", alpha=0.7, zorder=3, label=SEED if j == 0 else None)
            lo, hi = row.get(f"{PSNR_GAIN.key}_lo", math.nan), row.get(f"{PSNR_GAIN.key}_hi", math.nan)
            if not (math.isnan(lo) or math.isnan(hi)):
                ax.plot([lo, hi], [j, j], color="k", lw=1.5, zorder=2)
            ax.plot([row[PSNR_GAIN.key]], [j], marker="|", color="k", ms=14, mew=2, ls="none", zorder=4,
                    label=MEAN if j == 0 else None)
    for ax in axes:
        failed_band(ax, "x")
    for ax in axes[-2:]:
        ax.set_xlabel("PSNR gain over chance (dB)")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle(f"Leakage per setting: PSNR gain over chance, each seed and the mean ({len(settings)} settings)",
                 fontsize=11)
    return drawn(fig, panels=per_panel, key=codes.key)


def bytes_figure(runs: pd.DataFrame, keys: list[str], train: list[str]) -> Drawn | None:
    """Uplink and downlink bytes of each training setting (stacked bars, one run per training and seed), in panels
    of at most ``MAX_SERIES`` settings; ``None`` when every setting sends the same bytes."""
    if not train or TOTAL_BYTES.key not in runs:
        return None
    once = runs.loc[runs[[*train, "seed"]].map(token).drop_duplicates().index]
    table = summarise(once, train)
    if table[TOTAL_BYTES.key].dropna().nunique() < 2:
        return None
    table = table[table[TOTAL_BYTES.key].notna()].reset_index(drop=True)
    fig, codes, per_panel, panels = _panels(table, train)
    axes = [ax for ax, _ in panels]
    for ax, mine in panels:
        up, down = mine[UPLINK_BYTES.key].to_numpy(dtype=float) / 1e6, mine[DOWNLINK_BYTES.key].to_numpy(dtype=float) / 1e6
        ax.barh(range(len(mine)), up, color="C0", label="uplink")
        ax.barh(range(len(mine)), down, left=up, color="C1", label="downlink")
    for ax in axes[-2:]:
        ax.set_xlabel("bytes sent in training, up + down (MB, 10^6 B)")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle("What each training setting sends (mean over seeds)", fontsize=11)
    return drawn(fig, panels=per_panel, key=codes.key)
