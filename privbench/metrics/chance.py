"""Chance baselines: what reconstructions that carry no information about the victim score."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from privbench.metrics.reconstruction import score
from privbench.figures import (
    LPIPS_CHANCE, LPIPS_GAIN, LPIPS_MEAN, PSNR_CHANCE, PSNR_GAIN, PSNR_MEAN, SSIM_CHANCE, SSIM_GAIN, SSIM_MEAN,
)

#: The uninformed reconstructions: the mean image of the test split, and random test images (non-members).
BASELINES = ("mean_image", "non_member")


def chance_images(count: int, test_images: torch.Tensor, *, seed: int) -> dict[str, torch.Tensor]:
    """``count`` uninformed reconstructions of each baseline kind (``[count, C, H, W]`` in [0, 1]).

    Example:
        >>> test = torch.rand(10, 1, 4, 4)
        >>> {k: tuple(v.shape) for k, v in chance_images(3, test, seed=0).items()}
        {'mean_image': (3, 1, 4, 4), 'non_member': (3, 1, 4, 4)}
    """
    mean = test_images.float().mean(0, keepdim=True).expand(count, *test_images.shape[1:]).clone()
    picks = np.random.default_rng([seed, 4099]).choice(len(test_images), count, replace=count > len(test_images))
    return {"mean_image": mean, "non_member": test_images[torch.from_numpy(picks)].float()}


def chance_baseline(truth: torch.Tensor, truth_labels: torch.Tensor, *, count: int, test_images: torch.Tensor,
                    seed: int, match_on: str = "mse", use_lpips: bool = True) -> dict[str, Any]:
    """Scores of each baseline against ``truth`` with the same matching as the attack's ``count`` images.

    Returns per-baseline PSNR/SSIM/LPIPS means and the strongest of them: ``psnr_chance`` and
    ``ssim_chance`` (highest), ``lpips_chance`` (lowest). When ``count`` is below the number
    of true images, Hungarian matching keeps the best-matched truths for the baselines too, so
    the chance figure carries the same best-of-N advantage as the attack's. ``chance_images`` holds
    the strongest baseline's images and their matched pairs (for the gallery; not a JSON value).
    """
    unknown = torch.full((count,), -1)
    per: dict[str, dict[str, float]] = {}
    pairs: dict[str, tuple[torch.Tensor, list[dict[str, Any]]]] = {}
    for name, images in chance_images(count, test_images, seed=seed).items():
        s = score(images, truth, recon_labels=unknown, truth_labels=truth_labels, match_on=match_on,
                  use_lpips=use_lpips)
        per[name] = {PSNR_MEAN.key: s[PSNR_MEAN.key], SSIM_MEAN.key: s[SSIM_MEAN.key], LPIPS_MEAN.key: s[LPIPS_MEAN.key]}
        pairs[name] = (images, s["matched"])
    lpips = [v[LPIPS_MEAN.key] for v in per.values() if not math.isnan(v[LPIPS_MEAN.key])]
    strongest = max(per, key=lambda k: per[k][PSNR_MEAN.key])
    return {"chance": per, "chance_strongest": strongest, "chance_images": pairs[strongest],
            PSNR_CHANCE.key: per[strongest][PSNR_MEAN.key],
            SSIM_CHANCE.key: max(v[SSIM_MEAN.key] for v in per.values()),
            LPIPS_CHANCE.key: min(lpips) if lpips else math.nan}


def gains(privacy: dict[str, Any]) -> dict[str, float]:
    """How far the attack beats chance: ``psnr_gain``, ``ssim_gain`` (higher: more leaked), ``lpips_gain``
    (chance LPIPS minus the attack's; higher: more leaked).

    Example:
        >>> gains({"psnr_mean": 30.0, "psnr_chance": 12.5, "ssim_mean": 0.9, "ssim_chance": 0.2})["psnr_gain"]
        17.5
    """
    nan = math.nan
    return {PSNR_GAIN.key: privacy.get(PSNR_MEAN.key, nan) - privacy.get(PSNR_CHANCE.key, nan),
            SSIM_GAIN.key: privacy.get(SSIM_MEAN.key, nan) - privacy.get(SSIM_CHANCE.key, nan),
            LPIPS_GAIN.key: privacy.get(LPIPS_CHANCE.key, nan) - privacy.get(LPIPS_MEAN.key, nan)}
