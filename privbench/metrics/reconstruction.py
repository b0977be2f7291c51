"""Score a reconstructed batch against the ground truth: Hungarian matching, mean and best."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from privbench.figures import (
    LABEL_ACCURACY,
    LPIPS_BEST,
    LPIPS_MEAN,
    MSE_MEAN,
    PSNR_BEST,
    PSNR_MEAN,
    PSNR_MEDIAN,
    RECOVERED_FRACTION,
    SSIM_BEST,
    SSIM_MEAN,
)
from privbench.metrics.image import mse, psnr, ssim
from privbench.metrics.lpips_metric import lpips_distance

MATCH_ON = ("mse", "ssim", "lpips")


@dataclass(frozen=True)
class Recovered:
    """When a true image counts as recovered: its matched reconstruction reaches both thresholds
    (``metrics.recovered_psnr`` and ``metrics.recovered_ssim``; privbench's default is Dimitrov et al.'s rule,
    PSNR at least 20 dB, with no SSIM bar)."""

    psnr: float = 20.0
    ssim: float = 0.0

    @classmethod
    def of(cls, metrics: Any) -> "Recovered":
        """The rule a config's ``metrics`` group states (its defaults where a key is absent)."""
        return cls(psnr=float(metrics.get("recovered_psnr", cls.psnr)),
                   ssim=float(metrics.get("recovered_ssim", cls.ssim)))

    def bar(self) -> dict[str, float]:
        """The rule as ``metrics.json`` records it (``privacy.recovered_bar``)."""
        return {"psnr": self.psnr, "ssim": self.ssim}

    def text(self) -> str:
        """The rule in words, as the summary prints it.

        Example:
            >>> Recovered().text(), Recovered(25.0, 0.8).text()
            ('PSNR >= 20 dB', 'PSNR >= 25 dB and SSIM >= 0.8')
        """
        rule = f"PSNR >= {self.psnr:g} dB"
        return rule + (f" and SSIM >= {self.ssim:g}" if self.ssim > 0 else "")  # 20 dB implies SSIM above 0

    def count(self, rows: list[dict[str, Any]]) -> int:
        """How many matched pairs pass (an SSIM bar of 0 or below is no bar: a pair's SSIM is not read)."""
        return sum(1 for row in rows if row["psnr"] >= self.psnr and (self.ssim <= 0 or row["ssim"] >= self.ssim))


def match(recon: torch.Tensor, truth: torch.Tensor, *, on: str = "mse") -> list[tuple[int, int]]:
    """Pairs ``(reconstruction, truth)`` minimising total cost (Hungarian algorithm).

    Cost is MSE, 1 - SSIM or LPIPS; with unequal counts only min(N, M) pairs are made.

    Example:
        >>> t = torch.rand(2, 1, 8, 8)
        >>> match(t.flip(0), t)
        [(0, 1), (1, 0)]
    """
    if on not in MATCH_ON:
        raise ValueError(f"metrics.match_on={on!r} is not one of {', '.join(MATCH_ON)}")
    cost_fn = {"mse": mse, "ssim": lambda a, b: 1.0 - ssim(a, b), "lpips": lpips_distance}[on]
    cost = np.array([[cost_fn(r, t) for t in truth] for r in recon])
    if on == "lpips" and np.isnan(cost).any():
        cost = np.array([[mse(r, t) for t in truth] for r in recon])
    rows, cols = linear_sum_assignment(cost)
    return [(int(r), int(c)) for r, c in zip(rows, cols)]


def score(recon: torch.Tensor, truth: torch.Tensor, *, recon_labels: torch.Tensor, truth_labels: torch.Tensor,
          match_on: str = "mse", use_lpips: bool = True, recovered: Recovered = Recovered()) -> dict[str, Any]:
    """Metrics of ``recon`` vs ``truth`` (both ``[N, C, H, W]`` in [0, 1]).

    Returns mean and best PSNR / SSIM / LPIPS, the median image's PSNR, mean MSE, label accuracy over matched
    pairs, the share of the true images recovered (``recovered``'s rule over all of ``truth``, so best-of-N
    matching cannot inflate it), and the per-pair values. LPIPS is NaN (missing) when disabled or unavailable.
    """
    pairs = match(recon, truth, on=match_on)
    rows = []
    for r, t in pairs:
        rows.append({
            "recon": r, "truth": t,
            "psnr": psnr(recon[r], truth[t]), "ssim": ssim(recon[r], truth[t]), "mse": mse(recon[r], truth[t]),
            "lpips": lpips_distance(recon[r], truth[t]) if use_lpips else math.nan,
            "label_ok": bool(int(recon_labels[r]) == int(truth_labels[t])),
        })
    def col(key: str) -> np.ndarray:
        return np.array([row[key] for row in rows], dtype=float)

    lp = col("lpips")
    out = {
        PSNR_MEAN.key: float(np.mean(col("psnr"))),
        PSNR_MEDIAN.key: float(np.median(col("psnr"))),
        PSNR_BEST.key: float(np.max(col("psnr"))),
        SSIM_MEAN.key: float(np.mean(col("ssim"))),
        SSIM_BEST.key: float(np.max(col("ssim"))),
        MSE_MEAN.key: float(np.mean(col("mse"))),
        LPIPS_MEAN.key: float(np.mean(lp)) if not np.isnan(lp).all() else math.nan,
        LPIPS_BEST.key: float(np.min(lp)) if not np.isnan(lp).all() else math.nan,
        LABEL_ACCURACY.key: float(np.mean(col("label_ok"))),
        RECOVERED_FRACTION.key: recovered.count(rows) / len(truth),
        "matched": rows,
    }
    return out
