"""The gallery page: per setting, true images, reconstructions and the chance baseline, with PSNR and labels."""
from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privbench.figures import PSNR_CHANCE, PSNR_GAIN, PSNR_MEAN
from privbench.regular import RESULT_BYTES, load_arrays, read_regular, read_text, regular
from privbench.report.grouping import token
from privbench.report.table import cell

#: Pairs shown first per setting (more when more were recovered), and how much each image is enlarged.
PAIRS, SCALE = 4, 4
#: The run's config key of the PSNR a recovered image reaches, and its default (``metrics.recovered_psnr``), for
#: gallery files written before they carried each pair's ``recovered`` flag (the run's PSNR and SSIM bar).
RECOVERED_KEY, RECOVERED_PSNR = "metrics.recovered_psnr", 20.0
#: Pairs embedded behind the click per setting, highest PSNR first (a cohort's sum holds hundreds of unrecovered
#: images; every pair stays in the run folder's ``gallery.npz``).
HIDDEN = 16


def members(runs: pd.DataFrame, keys: list[str], row: pd.Series) -> pd.DataFrame:
    """The runs of one summary-table row (same value of every grouping key)."""
    mask = pd.Series(True, index=runs.index)
    for key in keys:
        mask &= runs[key].map(token) == token(row[key])
    return runs[mask]


def png_uri(image: np.ndarray, *, scale: int = 1) -> str:
    """A ``data:`` URI of a uint8 ``[H, W, C]`` image, enlarged ``scale`` times (the gallery stores images at their
    own size and lets the page enlarge them: a page of every pair stays a fraction of the size)."""
    from PIL import Image

    array = image[..., 0] if image.shape[-1] == 1 else image
    picture = Image.fromarray(array)
    if scale != 1:
        picture = picture.resize((array.shape[1] * scale, array.shape[0] * scale), Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _figure(image: np.ndarray, caption: str, alt: str) -> str:
    """One image at its own size, shown ``SCALE`` times larger with its pixels kept square."""
    height, width = image.shape[:2]
    return (f'<figure><img src="{png_uri(image)}" width="{width * SCALE}" height="{height * SCALE}" '
            f'style="image-rendering:pixelated" alt="{html.escape(alt)}"><figcaption>{caption}</figcaption></figure>')


def _label(value: int) -> str:
    return "?" if value < 0 else str(value)


def recovered_flags(g: Any, bar: float) -> np.ndarray:
    """Which pairs count as recovered: the run's own flags (its PSNR and SSIM bar) where the file has them, else
    PSNR at least ``bar`` dB."""
    if "recovered" in g.files:
        return np.asarray(g["recovered"], dtype=bool)
    return np.asarray(g["psnr"], dtype=float) >= bar


def _pair(g: Any, i: int, recovered: bool) -> str:
    """One matched pair: the true image, its reconstruction (marked when it counts as recovered) and chance."""
    true_label, got = int(g["true_label"][i]), int(g["recon_label"][i])
    ok = "" if got < 0 else (" (right)" if got == true_label else " (wrong)")
    mark = " recovered" if recovered else ""
    return ("<div class='pair" + mark + "'>"
            + _figure(g["truth"][i], f"truth<br>label {_label(true_label)}", "ground truth")
            + _figure(g["recon"][i], f"rebuilt {g['psnr'][i]:.1f} dB<br>label {_label(got)}{ok}", "reconstruction")
            + _figure(g["chance"][i], f"chance {g['chance_psnr'][i]:.1f} dB<br>no label", "chance baseline")
            + "</div>")


def order_pairs(psnr: np.ndarray, recovered: np.ndarray) -> tuple[list[int], list[int]]:
    """The pairs shown first and those behind a click: the recovered ones first, then by PSNR, highest first (ties
    by position); first every recovered pair, at least ``PAIRS`` pairs.

    Example:
        >>> psnr = np.array([12.0, 31.5, 26.0, 9.0, 30.0, 8.0])
        >>> order_pairs(psnr, psnr >= 25.0)
        ([1, 4, 2, 0], [3, 5])
    """
    order = sorted(range(len(psnr)), key=lambda i: (not bool(recovered[i]), -float(psnr[i]), i))
    first = max(PAIRS, int(recovered.sum()))
    return order[:first], order[first:]


def setting_html(folder: Path, title: str, summary: str, *, bar: float = RECOVERED_PSNR) -> str:
    """One setting's section from a run folder's ``gallery.npz`` (its ``grid.png`` for runs written before it): the
    recovered pairs first, by PSNR, and the other pairs (the ``HIDDEN`` with the highest PSNR) in a ``<details>``
    below."""
    parts = [f"<section><h2>{html.escape(title)}</h2><p>{html.escape(summary)}</p>"]
    gallery = folder / "gallery.npz"
    if regular(gallery):
        with load_arrays(gallery) as g:
            flags = recovered_flags(g, bar)
            first, rest = order_pairs(np.asarray(g["psnr"], dtype=float), flags)
            rule = "to the run's bar" if "recovered" in g.files else f"to {bar:g} dB or more"
            parts.append(f"<p>{int(flags.sum())} of {len(first) + len(rest)} pairs rebuilt {rule} "
                         "(framed), highest PSNR first.</p><div class='pairs'>")
            parts += [_pair(g, i, bool(flags[i])) for i in first]
            parts.append("</div>")
            if rest:
                left = (f"; the {len(rest) - HIDDEN} with the lowest PSNR are not embedded (the run folder's "
                        "gallery.npz holds them)" if len(rest) > HIDDEN else "")
                parts.append(f"<details><summary>the other {len(rest)} pairs{left}</summary><div class='pairs'>"
                             + "".join(_pair(g, i, bool(flags[i])) for i in rest[:HIDDEN]) + "</div></details>")
    elif regular(folder / "grid.png"):
        parts.append("<div class='pairs'>")
        data = base64.b64encode(read_regular(folder / "grid.png", RESULT_BYTES)).decode()
        parts.append(f'<figure><img src="data:image/png;base64,{data}" alt="grid"><figcaption>truth (top), '
                     f"reconstruction (bottom); this run predates the gallery file</figcaption></figure></div>")
    else:
        parts.append("<p>no reconstruction in this run</p>")
    threat = folder / "threat_model.json"
    if regular(threat):
        try:
            text = json.dumps(json.loads(read_text(threat)), indent=1)
        except (OSError, ValueError):
            text = "(unreadable)"
        parts.append(f"<details><summary>threat model</summary><pre>{html.escape(text)}</pre></details>")
    parts.append("</section>")
    return "".join(parts)


def gallery_page(table: pd.DataFrame, runs: pd.DataFrame, *, root: Path, title: str, style: str) -> str | None:
    """Every setting with a reconstruction: the lowest seed's run, its recovered pairs first and the best of the
    rest on demand (``None`` when no setting has one, e.g. a membership study)."""
    keys = list(table.attrs.get("keys", []))
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>",
             "<p>Per setting, the lowest seed's run: each true image (the image the payload was computed from, "
             "matched one-to-one), the attack's reconstruction of it and the chance baseline (the stronger of the "
             f"test split's mean image and a random test image), enlarged {SCALE}x. PSNR of each against the true "
             "image; labels as recovered by the attack (? when it recovers none). Pairs rebuilt to the run's "
             "metrics.recovered_psnr or more are framed and come first, highest PSNR first; the others are behind "
             "a click.</p>"]
    shown = 0
    for _, row in table.iterrows():
        group = members(runs, keys, row).sort_values("seed")
        if group.empty or group[PSNR_MEAN.key].isna().all():
            continue
        run = group[group[PSNR_MEAN.key].notna()].iloc[0]
        name = ", ".join(f"{k}={row[k]}" for k in keys) or "all runs"
        summary = (f"seed {run['seed']} shown; over n={row['runs']} seeds: PSNR {cell(row, PSNR_MEAN.key)} dB, "
                   f"chance {cell(row, PSNR_CHANCE.key)} dB, gain {cell(row, PSNR_GAIN.key)} dB, leaks: {row['leaks']}")
        bar = pd.to_numeric(pd.Series([run.get(RECOVERED_KEY, RECOVERED_PSNR)]), errors="coerce").fillna(
            RECOVERED_PSNR).iloc[0]
        parts.append(setting_html(Path(root) / run["run_dir"], name, summary, bar=float(bar)))
        shown += 1
    if not shown:
        return None
    parts.append("</body></html>")
    return "\n".join(parts)


def style() -> str:
    """CSS shared by the audit and gallery pages (tables scroll inside their box; nothing wider than the page)."""
    return ("body{font-family:sans-serif;margin:1.5em;max-width:1240px}"
            ".scroll{overflow:auto;max-width:100%;max-height:70vh;border:1px solid #ddd}"
            "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px;"
            "white-space:nowrap}th{position:sticky;top:0;background:#f4f4f4}img{max-width:100%}"
            "pre{font-size:11px;background:#f6f6f6;overflow:auto}.pairs{display:flex;flex-wrap:wrap;gap:14px}"
            ".pair{display:flex;gap:4px;border:1px solid #eee;padding:4px}.pair.recovered{border:2px solid #2a7}"
            "details{margin:6px 0}summary{cursor:pointer;font-size:13px}figure{margin:0;text-align:center}"
            "figcaption{font-size:11px}section{margin-bottom:1.2em}"
            ".figure-text{text-align:left;font-size:12px;color:#333;margin:4px 0 18px;white-space:normal}")
