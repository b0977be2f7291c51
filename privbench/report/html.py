"""The audit page: caption, summary table, figures, and every run in a scrolling table; links the gallery."""
from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

import pandas as pd

from privbench.figures import MISSING, RUN_TABLE
from privbench.report.draw import Drawn
from privbench.report.gallery import style
from privbench.report.paired import CAPTION
from privbench.report.table import LABELS, caption, sort_key, to_html

#: Columns of the per-run table (after the grouping keys and the seed).
RUN_COLUMNS = [str(f) for f in RUN_TABLE]


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def _runs_table(runs: pd.DataFrame, keys: list[str]) -> str:
    columns = [*keys, "seed", *[c for c in RUN_COLUMNS if c in runs and runs[c].notna().any()], "run_dir"]
    order = sorted(range(len(runs)), key=lambda i: tuple(sort_key(runs[k].iloc[i]) for k in [*keys, "seed"]))
    runs = runs.iloc[order]
    head = "".join(f"<th>{html.escape(LABELS.get(c, c))}</th>" for c in columns)

    def text(value: object) -> str:
        if isinstance(value, float):
            return MISSING if value != value else (f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}")
        return str(value)

    body = "".join("<tr>" + "".join(f"<td>{html.escape(text(r[c]))}</td>" for c in columns) + "</tr>"
                   for _, r in runs.iterrows())
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(title: str, path: Path, drawn: Drawn) -> str:
    """A figure with its drawn text below it: what each series is, the codes of long setting names, what the
    figure leaves out, and the axes; each panel's series and the x ticks as data for a test."""
    parts = []
    if drawn.legend:
        parts.append("<span class='series'>Series: " + "; ".join(html.escape(t) for t in drawn.legend) + ".</span>")
    if drawn.key:
        parts.append("<span class='key'>Key: " + "; ".join(html.escape(t) for t in drawn.key) + ".</span>")
    if drawn.remark:
        parts.append(f"<span class='remark'>{html.escape(drawn.remark)}</span>")
    axes = list(dict.fromkeys(drawn.axes))
    if axes:
        parts.append("<span class='axes'>Axes: " + "; ".join(html.escape(t) for t in axes) + ".</span>")
    ticks = html.escape(" | ".join(drawn.ticks), quote=True)
    panels = html.escape(json.dumps(drawn.panels), quote=True)
    caption = " ".join(parts)
    return (f"<figure><h3>{html.escape(title)}</h3>{_img(path, title)}<figcaption class='figure-text' "
            f"data-xticks=\"{ticks}\" data-panels=\"{panels}\">{caption}</figcaption></figure>")


def kept_figures(old_page: str, titles: list[str]) -> list[str]:
    """The ``<figure>`` blocks of ``titles`` in an earlier page, as they are (figures a rebuild from ``runs.csv``
    cannot draw, such as the membership ROC from the run folders), marked ``data-kept``."""
    out = []
    for title in titles:
        found = re.search(f"<figure><h3>{re.escape(html.escape(title))}</h3>.*?</figure>", old_page, re.DOTALL)
        if found and "data-kept=" in found.group(0):
            out.append(found.group(0))
        elif found:
            out.append(found.group(0).replace("<figcaption class='figure-text'",
                                              "<figcaption class='figure-text' data-kept='run folders'", 1))
    return out


def page(table: pd.DataFrame, runs: pd.DataFrame, plots: dict[str, tuple[Path, Drawn]], *, title: str,
         gallery: str | None = "gallery.html", kept: list[str] | None = None, paired: str = "") -> str:
    """The HTML text; figures are embedded as data URIs so the file stands alone (the gallery is a sibling file);
    ``kept`` figure blocks (see ``kept_figures``) follow the drawn ones; ``paired`` is the paired-differences table
    (``privbench.report.paired``), shown after the summary."""
    keys = list(table.attrs.get("keys", []))
    link = f"<p>Reconstructions next to the truth and the chance baseline: <a href='{gallery}'>gallery</a>.</p>"
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{style()}</style></head><body><h1>{html.escape(title)}</h1>",
             "<p>Leakage: PSNR/SSIM of the rebuilt images against the images the payload was computed from "
             "(higher: more leaked), LPIPS (lower: more leaked), each next to its chance baseline (what an attacker "
             "who learned nothing about the records scores: the strongest of the test split's mean image, random test "
             "images and, in runs since 2026-12-01, the client's classes' mean test images, with the same matching); "
             "images recovered: the share of the true images rebuilt to the run's bar (metrics.recovered_psnr and "
             "recovered_ssim; by default 20 dB, Dimitrov et al.'s rule). Utility: known-client accuracy, "
             "agnostic-client accuracy from the learnGene. "
             "Membership: AUC and TPR at FPR 1 % and 0.1 % of a test that guesses which records the message was "
             "computed from, against class-matched non-members (chance: AUC 0.5, TPR = FPR). "
             "Bytes: training traffic. Epsilon: the victim's DP-SGD epsilon.</p>",
             link if gallery else "",
             "<h2>Summary</h2>", f"<p>{html.escape(caption(table)).replace('`', '')}</p>",
             f"<div class='scroll'>{to_html(table)}</div>",
             *([f"<h2>Paired differences</h2><p>{html.escape(CAPTION)}</p><div class='scroll'>{paired}</div>"]
               if paired else []),
             "<h2>Figures</h2>", *[_figure(n, p, drawn) for n, (p, drawn) in plots.items()], *(kept or []),
             f"<h2>Runs ({len(runs)})</h2>", f"<div class='scroll'>{_runs_table(runs, keys)}</div>",
             "</body></html>"]
    return "\n".join(parts)
