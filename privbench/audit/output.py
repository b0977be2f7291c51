"""Files of a run (metrics.json, metrics.csv, grid.png, roc.png, the gallery); the printed table is ``audit.summary``."""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from privbench.csv_cells import safe_row
from privbench.io import atomic_write_bytes, atomic_write_text
from privbench.metrics.image import psnr
from privbench.metrics.reconstruction import Recovered


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
    numbers (an unbounded epsilon) are written as ``"inf"``.
    """
    atomic_write_text(out / "threat_model.json", _json({**metrics.get("threat_model", {}),
                                                        "defense": metrics.get("defense", {})}))
    row = safe_row(flat_row(metrics))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(row))
    writer.writeheader()
    writer.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()})
    atomic_write_text(out / "metrics.csv", buffer.getvalue())
    atomic_write_text(out / "metrics.json", _json(metrics))


def write_grid(path: Path, truth: torch.Tensor, recon: torch.Tensor, *, scale: int = 4) -> None:
    """PNG grid: ground truth on the top row, matched reconstructions below ([0, 1] images)."""
    from PIL import Image
    from torchvision.utils import make_grid

    images = torch.cat([truth, recon]).float().clamp(0, 1)
    if images.shape[1] == 1:
        images = images.repeat(1, 3, 1, 1)
    images = F.interpolate(images, scale_factor=scale, mode="nearest")
    grid = make_grid(images, nrow=len(truth), padding=2, pad_value=1.0)
    array = (grid.permute(1, 2, 0).numpy() * 255).round().astype("uint8")
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    atomic_write_bytes(path, buffer.getvalue())


def write_roc(path: Path, fpr: Any, tpr: Any, *, title: str) -> None:
    """The membership test's ROC on log-log axes with the chance line (TPR = FPR), as the field draws it."""
    import numpy as np

    from privbench.report.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.8, 4.2))
    floor = 1e-4
    ax.plot(np.maximum(fpr, floor), np.maximum(tpr, floor), lw=1.5, label="attack")
    ax.plot([floor, 1], [floor, 1], "k:", lw=1, label="chance (TPR = FPR)")
    for at in (0.01, 0.001):
        ax.axvline(at, color="0.7", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(floor, 1)
    ax.set_ylim(floor, 1)
    ax.set_xlabel("false-positive rate")
    ax.set_ylabel("true-positive rate")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


#: Most pairs kept for the report's gallery (the best-rebuilt first).
GALLERY_PAIRS = 256


def write_gallery(path: Path, *, truth: torch.Tensor, recon: torch.Tensor, truth_labels: torch.Tensor,
                  recon_labels: torch.Tensor, pairs: list[dict[str, Any]], chance: torch.Tensor,
                  chance_pairs: list[dict[str, Any]], recovered: Recovered = Recovered()) -> None:
    """``gallery.npz``: per matched pair, best PSNR first (at most ``GALLERY_PAIRS``), the true image, the
    reconstruction and the strongest chance baseline's image matched to the same truth, as uint8 ``[P, H, W, C]``,
    with their PSNRs, the pair's SSIM, whether it counts as recovered under ``recovered``, and the true and
    recovered labels (-1: none). The report's gallery page reads only this file.
    """
    by_truth = {m["truth"]: m["recon"] for m in chance_pairs}
    kept = sorted(pairs, key=lambda m: -m["psnr"])[:GALLERY_PAIRS]
    picks = [by_truth.get(m["truth"], min(m["recon"], len(chance) - 1)) for m in kept]

    def u8(images: torch.Tensor) -> Any:
        return (images.float().clamp(0, 1).permute(0, 2, 3, 1).numpy() * 255).round().astype("uint8")

    t = truth[[m["truth"] for m in kept]]
    c = chance[picks]
    buffer = io.BytesIO()
    np.savez_compressed(buffer, truth=u8(t), recon=u8(recon[[m["recon"] for m in kept]]), chance=u8(c),
                        psnr=np.array([m["psnr"] for m in kept], dtype=float),
                        ssim=np.array([m["ssim"] for m in kept], dtype=float),
                        recovered=np.array([recovered.count([m]) == 1 for m in kept], dtype=bool),
                        chance_psnr=np.array([psnr(a, b) for a, b in zip(c, t)], dtype=float),
                        true_label=np.array([int(truth_labels[m["truth"]]) for m in kept]),
                        recon_label=np.array([int(recon_labels[m["recon"]]) for m in kept]))
    atomic_write_bytes(path, buffer.getvalue())


#: Columns the run summary fits in.
