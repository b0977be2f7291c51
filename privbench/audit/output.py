"""Files of a run (metrics.json, metrics.csv, grid.png, threat_model.json) and the printed table."""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from privbench.io import atomic_write_bytes, atomic_write_text

TABLE = [
    ("fl", "{}"), ("payload", "{}"), ("attack", "{}"), ("defense", "{}"),
    ("psnr_mean", "{:.2f}"), ("psnr_chance", "{:.2f}"), ("psnr_gain", "{:+.2f}"), ("psnr_best", "{:.2f}"),
    ("ssim_mean", "{:.3f}"), ("ssim_chance", "{:.3f}"), ("lpips_mean", "{:.3f}"), ("lpips_chance", "{:.3f}"),
    ("num_true", "{}"),
    ("projection_psnr_mean", "{:.2f}"), ("label_accuracy", "{:.2f}"), ("epsilon", "{:.2f}"),
    ("accuracy", "{:.3f}"), ("agnostic_accuracy_learngene", "{:.3f}"),
    ("uplink_bytes", "{:,}"), ("downlink_bytes", "{:,}"), ("uplink_ratio", "{:.3f}"), ("total_ratio", "{:.3f}"),
    ("learngene_mean_bytes", "{:,.0f}"),
]


def flat_row(metrics: dict[str, Any]) -> dict[str, Any]:
    """One CSV row: the scalar entries of every section of ``metrics.json``."""
    row: dict[str, Any] = {}
    for section in ("run", "privacy", "utility", "bytes", "defense", "timing"):
        for key, value in metrics.get(section, {}).items():
            if isinstance(value, (int, float, str, bool)) or value is None:
                row[key] = value
    return row


def _json(value: Any) -> str:
    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(value), indent=2)


def write_metrics(out: Path, metrics: dict[str, Any]) -> None:
    """Write ``metrics.json``, a one-row ``metrics.csv`` and ``threat_model.json`` atomically.

    Non-finite numbers are written as missing (``null`` / empty), never as 0; infinite
    PSNR (exact reconstruction) is written as ``"inf"``.
    """
    atomic_write_text(out / "threat_model.json", _json({**metrics.get("threat_model", {}),
                                                        "defense": metrics.get("defense", {})}))
    row = flat_row(metrics)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(row))
    writer.writeheader()
    writer.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()})
    atomic_write_text(out / "metrics.csv", buffer.getvalue())
    atomic_write_text(out / "metrics.json", _json(metrics))


def write_grid(path: Path, truth: torch.Tensor, recon: torch.Tensor, *, scale: int = 4) -> None:
    """PNG grid: ground truth on the top row, matched reconstructions below ([0, 1] images)."""
    from torchvision.utils import make_grid
    from PIL import Image

    images = torch.cat([truth, recon]).float().clamp(0, 1)
    if images.shape[1] == 1:
        images = images.repeat(1, 3, 1, 1)
    images = F.interpolate(images, scale_factor=scale, mode="nearest")
    grid = make_grid(images, nrow=len(truth), padding=2, pad_value=1.0)
    array = (grid.permute(1, 2, 0).numpy() * 255).round().astype("uint8")
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    atomic_write_bytes(path, buffer.getvalue())


def table(metrics: dict[str, Any]) -> str:
    """A compact two-line table of the run's headline figures."""
    row = flat_row(metrics)
    cells = []
    for key, fmt in TABLE:
        if key not in row:
            continue  # a column this run has no notion of (e.g. no attack, no agnostic clients)
        value = row[key]
        text = "-" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)
        cells.append((key, text))
    widths = [max(len(k), len(v)) for k, v in cells]
    head = "  ".join(k.rjust(w) for (k, _), w in zip(cells, widths))
    body = "  ".join(v.rjust(w) for (_, v), w in zip(cells, widths))
    return f"{head}\n{body}"
