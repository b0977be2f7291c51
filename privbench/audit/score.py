"""Score a reconstruction against the truth and the chance level, and write its grid and gallery."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from privbench.audit.output import write_gallery, write_grid
from privbench.metrics.chance import chance_baseline, gains
from privbench.metrics.reconstruction import score
from privbench.progress import phase


def score_reconstruction(recon: torch.Tensor, labels: torch.Tensor, truth: torch.Tensor, truth_labels: torch.Tensor,
                         *, non_members: torch.Tensor, seed: int, match_on: str, use_lpips: bool,
                         out: Path) -> dict[str, Any]:
    """Match ``recon`` one-to-one against ``truth`` (``[N, C, H, W]`` in [0, 1]); score it and the chance
    baselines drawn from ``non_members`` with the same matching; write ``grid.png`` and ``gallery.npz``.

    Returns the privacy figures: PSNR/SSIM/LPIPS, their chance levels and gains, the matching.
    """
    with phase("scoring", total=2, unit="set") as bar:
        scores = score(recon, truth, recon_labels=labels, truth_labels=truth_labels, match_on=match_on,
                       use_lpips=use_lpips)
        bar.update(1, psnr=scores.get("psnr_mean"))
        chance = chance_baseline(truth, truth_labels, count=len(recon), test_images=non_members, seed=seed,
                                 match_on=match_on, use_lpips=use_lpips)
        bar.update(1, chance=chance.get("psnr_chance"))
    pairs = scores["matched"]
    write_grid(out / "grid.png", truth[[m["truth"] for m in pairs]], recon[[m["recon"] for m in pairs]])
    chance_images, chance_pairs = chance.pop("chance_images")
    write_gallery(out / "gallery.npz", truth=truth, recon=recon, truth_labels=truth_labels, recon_labels=labels,
                  pairs=pairs, chance=chance_images, chance_pairs=chance_pairs)
    scores.update(chance)
    return {"num_reconstructed": len(recon), "num_true": len(truth), **scores, **gains(scores)}
