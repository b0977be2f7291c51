"""Read every finished run (``metrics.json``) under a folder into one pandas DataFrame."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

COLUMNS = ["fl", "payload", "attack", "defense", "setting", "variant", "seed", "psnr_mean", "psnr_chance", "psnr_gain",
           "psnr_best", "ssim_mean", "ssim_chance", "ssim_best", "lpips_mean", "lpips_chance", "lpips_best",
           "num_true", "label_accuracy", "projection_psnr_mean", "accuracy", "personal_accuracy", "cluster_rand_index",
           "agnostic_accuracy_learngene", "uplink_bytes", "downlink_bytes", "total_bytes", "epsilon", "run_dir"]
#: Overrides already shown by other columns (or that do not change what is computed).
SHOWN = {"fl", "payload", "attack", "defense", "seed", "results_dir", "resume", "name", "experiment"}
SHOWN_PREFIXES = ("defense.", "hydra")
SETTING_KEYS = {"noise": ("sigma",), "prune": ("p",), "dpsgd": ("noise_multiplier", "target_epsilon", "max_grad_norm", "cover")}


def _number(value: Any) -> float:
    if value is None:
        return math.nan
    if value == "inf":
        return math.inf
    return float(value)


def setting(defense: dict[str, Any]) -> str:
    """A short label of a defence's settings, e.g. ``sigma=0.01`` (``-`` for none)."""
    keys = SETTING_KEYS.get(defense.get("defense", "none"), ())
    def text(value: Any) -> str:
        return "+".join(map(str, value)) or "none" if isinstance(value, list) else str(value)

    parts = [f"{k}={text(defense[k])}" for k in keys if defense.get(k) is not None]
    return " ".join(parts) or "-"


def variant(overrides: list[str]) -> str:
    """The run's other command-line overrides, e.g. ``fl.downlink=gene`` (``-`` if none)."""
    keys = [(o, o.split("=", 1)[0].lstrip("+~")) for o in overrides]
    rest = [o for o, k in keys if k not in SHOWN and not k.startswith(SHOWN_PREFIXES)]
    return " ".join(sorted(rest)) or "-"


def row(metrics: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """One table row from a run's ``metrics.json``; absent figures are NaN, never 0."""
    run, privacy, utility = metrics.get("run", {}), metrics.get("privacy", {}), metrics.get("utility", {})
    nbytes, defense = metrics.get("bytes", {}), metrics.get("defense", {"defense": run.get("defense", "none")})
    out = {"fl": run.get("fl"), "payload": run.get("payload") or "-", "attack": run.get("attack"),
           "defense": run.get("defense"), "setting": setting(defense),
           "variant": variant(run.get("overrides", [])), "seed": run.get("seed"), "run_dir": str(run_dir)}
    for key in ("psnr_mean", "psnr_chance", "psnr_gain", "psnr_best", "ssim_mean", "ssim_chance", "ssim_best",
                "lpips_mean", "lpips_chance", "lpips_best", "num_true", "label_accuracy", "projection_psnr_mean"):
        out[key] = _number(privacy.get(key))
    for key in ("accuracy", "personal_accuracy", "cluster_rand_index", "agnostic_accuracy_learngene"):
        out[key] = _number(utility.get(key))
    for key in ("uplink_bytes", "downlink_bytes", "total_bytes"):
        out[key] = _number(nbytes.get(key))
    out["epsilon"] = _number(defense.get("epsilon"))
    return out


def collect(root: Path) -> pd.DataFrame:
    """All finished runs under ``root`` (recursively), one row each, in ``COLUMNS`` order.

    ``run_dir`` is relative to ``root``.
    """
    rows = []
    root = Path(root)
    for path in sorted(root.rglob("metrics.json")):
        try:
            rows.append(row(json.loads(path.read_text()), path.parent.relative_to(root)))
        except (OSError, json.JSONDecodeError):
            continue  # a run being written is not finished
    return pd.DataFrame(rows, columns=COLUMNS)
