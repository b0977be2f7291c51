"""The gallery page: per setting, true images, reconstructions and the chance baseline, with PSNR and labels."""
from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd

from privbench.report.grouping import token
from privbench.report.table import cell
from privbench.figures import PSNR_CHANCE, PSNR_GAIN, PSNR_MEAN

#: Pairs shown per setting, and how much each image is enlarged (nearest neighbour).
PAIRS, SCALE = 4, 4


def members(runs: pd.DataFrame, keys: list[str], row: pd.Series) -> pd.DataFrame:
    """The runs of one summary-table row (same value of every grouping key)."""
    mask = pd.Series(True, index=runs.index)
    for key in keys:
        mask &= runs[key].map(token) == token(row[key])
    return runs[mask]


def png_uri(image: np.ndarray, *, scale: int = SCALE) -> str:
    """A ``data:`` URI of a uint8 ``[H, W, C]`` image enlarged ``scale`` times."""
    from PIL import Image

    array = image[..., 0] if image.shape[-1] == 1 else image
    picture = Image.fromarray(array).resize((array.shape[1] * scale, array.shape[0] * scale), Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _figure(image: np.ndarray, caption: str, alt: str) -> str:
    return (f'<figure><img src="{png_uri(image)}" alt="{html.escape(alt)}">'
            f"<figcaption>{caption}</figcaption></figure>")


def _label(value: int) -> str:
    return "?" if value < 0 else str(value)


def setting_html(folder: Path, title: str, summary: str) -> str:
    """One setting's section from a run folder's ``gallery.npz`` (its ``grid.png`` for runs written before it)."""
    parts = [f"<section><h2>{html.escape(title)}</h2><p>{html.escape(summary)}</p><div class='pairs'>"]
    gallery = folder / "gallery.npz"
    if gallery.exists():
        with np.load(gallery) as g:
            for i in range(min(PAIRS, len(g["truth"]))):
                true_label, got = int(g["true_label"][i]), int(g["recon_label"][i])
                ok = "" if got < 0 else (" (right)" if got == true_label else " (wrong)")
                parts.append("<div class='pair'>"
                             + _figure(g["truth"][i], f"truth<br>label {_label(true_label)}", "ground truth")
                             + _figure(g["recon"][i], f"rebuilt {g['psnr'][i]:.1f} dB<br>label {_label(got)}{ok}",
                                       "reconstruction")
                             + _figure(g["chance"][i], f"chance {g['chance_psnr'][i]:.1f} dB<br>no label",
                                       "chance baseline")
                             + "</div>")
    elif (folder / "grid.png").exists():
        data = base64.b64encode((folder / "grid.png").read_bytes()).decode()
        parts.append(f'<figure><img src="data:image/png;base64,{data}" alt="grid"><figcaption>truth (top), '
                     f"reconstruction (bottom); this run predates the gallery file</figcaption></figure>")
    else:
        parts.append("<p>no reconstruction in this run</p>")
    parts.append("</div>")
    threat = folder / "threat_model.json"
    if threat.exists():
        try:
            text = json.dumps(json.loads(threat.read_text()), indent=1)
        except ValueError:
            text = "(unreadable)"
        parts.append(f"<details><summary>threat model</summary><pre>{html.escape(text)}</pre></details>")
    parts.append("</section>")
    return "".join(parts)


def gallery_page(table: pd.DataFrame, runs: pd.DataFrame, *, root: Path, title: str, style: str) -> str | None:
    """Every setting with a reconstruction: the lowest seed's run, its first ``PAIRS`` matched pairs (``None`` when
    no setting has one, e.g. a membership study)."""
    keys = list(table.attrs.get("keys", []))
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>",
             "<p>Per setting, the lowest seed's run: each true image (the image the payload was computed from, "
             "matched one-to-one), the attack's reconstruction of it and the chance baseline (the stronger of the "
             f"test split's mean image and a random test image), enlarged {SCALE}x. PSNR of each against the true "
             "image; labels as recovered by the attack (? when it recovers none).</p>"]
    shown = 0
    for _, row in table.iterrows():
        group = members(runs, keys, row).sort_values("seed")
        if group.empty or group[PSNR_MEAN.key].isna().all():
            continue
        run = group[group[PSNR_MEAN.key].notna()].iloc[0]
        name = ", ".join(f"{k}={row[k]}" for k in keys) or "all runs"
        summary = (f"seed {run['seed']} shown; over n={row['runs']} seeds: PSNR {cell(row, PSNR_MEAN.key)} dB, "
                   f"chance {cell(row, PSNR_CHANCE.key)} dB, gain {cell(row, PSNR_GAIN.key)} dB, leaks: {row['leaks']}")
        parts.append(setting_html(Path(root) / run["run_dir"], name, summary))
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
            ".pair{display:flex;gap:4px;border:1px solid #eee;padding:4px}figure{margin:0;text-align:center}"
            "figcaption{font-size:11px}section{margin-bottom:1.2em}"
            ".figure-text{text-align:left;font-size:12px;color:#333;margin:4px 0 18px;white-space:normal}")
