"""One self-contained HTML audit page: tables, plots, reconstruction grids, threat models."""
from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import pandas as pd


def _img(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(Path(path).stem)}">'


def page(table: pd.DataFrame, runs: pd.DataFrame, plots: dict[str, Path], *, title: str, root: Path) -> str:
    """The HTML text; images are embedded as data URIs so the file stands alone."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:3px 6px}img{max-width:100%}pre{font-size:11px;background:#f6f6f6}"
             "</style></head><body>", f"<h1>{html.escape(title)}</h1>",
             "<p>Leakage: PSNR/SSIM (higher = more leaked), LPIPS (lower = more leaked), label accuracy. "
             "Utility: known-client accuracy, agnostic accuracy from the learnGene. Bytes: training traffic. "
             "Missing values are shown as NaN, never 0.</p>",
             "<h2>Summary</h2>", table.to_html(index=False, na_rep="–", float_format=lambda v: f"{v:.4g}"),
             "<h2>Trade-offs</h2>", *[f"<h3>{html.escape(n)}</h3>{_img(p)}" for n, p in plots.items()],
             "<h2>Runs</h2>"]
    for run in runs.itertuples():
        folder = Path(root) / run.run_dir
        parts.append(f"<h3>{html.escape(f'{run.fl} / {run.payload} / {run.attack} / {run.defense} {run.setting} / seed {run.seed}')}</h3>")
        parts.append(f"<p><code>{html.escape(str(run.run_dir))}</code></p>")
        if (folder / "grid.png").exists():
            parts.append("<p>ground truth (top) vs reconstruction (bottom)</p>" + _img(folder / "grid.png"))
        threat = folder / "threat_model.json"
        if threat.exists():
            text = json.dumps(json.loads(threat.read_text()), indent=1)
            parts.append(f"<details><summary>threat model</summary><pre>{html.escape(text)}</pre></details>")
    parts.append("</body></html>")
    return "\n".join(parts)
