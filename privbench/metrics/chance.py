"""Chance baselines: what reconstructions that carry no information about the victim's records score.

Two kinds: *uninformed* (the test split's mean image, random test images), and *class-informed*: an attacker who
knows only which classes the victim holds outputs each class's mean test image (the classes the attack's own labels
name, and, as an upper bound, the true ones). ``psnr_chance`` is the strongest of all, so a gain over it is more
than class knowledge.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import torch

from privbench.figures import (
    LPIPS_CHANCE,
    LPIPS_GAIN,
    LPIPS_MEAN,
    PSNR_CHANCE,
    PSNR_CHANCE_INFORMED,
    PSNR_CHANCE_UNINFORMED,
    PSNR_GAIN,
    PSNR_MEAN,
    PSNR_MEDIAN,
    PSNR_MEDIAN_GAIN,
    RECOVERED_FRACTION,
    RECOVERED_FRACTION_CHANCE,
    SSIM_CHANCE,
    SSIM_GAIN,
    SSIM_MEAN,
)
from privbench.metrics.reconstruction import Recovered, score

#: The uninformed reconstructions: the mean image of the test split, and random test images (non-members).
BASELINES = ("mean_image", "non_member")
#: The class-informed ones: class mean images of the true classes (an upper bound), and of the attack's labels.
INFORMED = ("class_mean", "class_mean_inferred")


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


def class_mean_images(count: int, labels: torch.Tensor, test_images: torch.Tensor,
                      test_labels: torch.Tensor) -> torch.Tensor | None:
    """``count`` class mean images of the test split for the classes in ``labels``: most frequent class first,
    cycling, so every class is drawn once ``count`` reaches their number. None when no class is in the test split.

    Example:
        >>> test = torch.stack([torch.zeros(1, 2, 2), torch.ones(1, 2, 2), torch.full((1, 2, 2), 3.0)])
        >>> class_mean_images(3, torch.tensor([7, 5, 7]), test, torch.tensor([5, 7, 7]))[:, 0, 0, 0].tolist()
        [2.0, 0.0, 2.0]
    """
    present = set(int(c) for c in test_labels.tolist())
    order = [c for c, _ in sorted(Counter(int(c) for c in labels.tolist()).items(), key=lambda kv: (-kv[1], kv[0]))
             if c in present]
    if not order:
        return None
    means = {c: test_images[test_labels == c].float().mean(0) for c in order}
    return torch.stack([means[order[i % len(order)]] for i in range(count)])


def chance_baseline(truth: torch.Tensor, truth_labels: torch.Tensor, *, count: int, test_images: torch.Tensor,
                    seed: int, match_on: str = "mse", use_lpips: bool = True, test_labels: torch.Tensor | None = None,
                    inferred_labels: torch.Tensor | None = None, recovered: Recovered = Recovered()) -> dict[str, Any]:
    """Scores of each baseline against ``truth`` with the same matching as the attack's ``count`` images.

    Returns per-baseline PSNR/SSIM/LPIPS means, recovered fractions and matched pairs' PSNR and SSIM (so a run can
    be recounted at another bar: ``privbench.rescore``); ``psnr_chance_uninformed`` and
    ``psnr_chance_informed`` (class mean images, with ``test_labels``: of the true classes, and of
    ``inferred_labels``, the attack's, where it has any) and the strongest of all: ``psnr_chance`` and
    ``ssim_chance`` (highest), ``lpips_chance`` (lowest), ``recovered_fraction_chance`` (highest). When
    ``count`` is below the number of true images, Hungarian matching keeps the best-matched truths for the
    baselines too, so the chance figure carries the same best-of-N advantage as the attack's. ``chance_images``
    holds the strongest baseline's images and their matched pairs (for the gallery; not a JSON value).
    """
    unknown = torch.full((count,), -1)
    kinds: dict[str, torch.Tensor] = dict(chance_images(count, test_images, seed=seed))
    if test_labels is not None:
        for name, labels in (("class_mean", truth_labels), ("class_mean_inferred", inferred_labels)):
            known = labels[labels >= 0] if labels is not None else None
            images = class_mean_images(count, known, test_images, test_labels) if known is not None and len(known) else None
            if images is not None:
                kinds[name] = images
    per: dict[str, dict[str, Any]] = {}
    pairs: dict[str, tuple[torch.Tensor, list[dict[str, Any]]]] = {}
    for name, images in kinds.items():
        twin = next((k for k, (done, _) in pairs.items() if torch.equal(done, images)), None)
        if twin is not None:  # the attack's labels named the true classes: the same images, the same scores
            per[name], pairs[name] = dict(per[twin]), pairs[twin]
            continue
        s = score(images, truth, recon_labels=unknown, truth_labels=truth_labels, match_on=match_on,
                  use_lpips=use_lpips, recovered=recovered)
        per[name] = {PSNR_MEAN.key: s[PSNR_MEAN.key], SSIM_MEAN.key: s[SSIM_MEAN.key], LPIPS_MEAN.key: s[LPIPS_MEAN.key],
                     RECOVERED_FRACTION.key: s[RECOVERED_FRACTION.key],
                     "matched": [{"psnr": m["psnr"], "ssim": m["ssim"]} for m in s["matched"]]}
        pairs[name] = (images, s["matched"])
    lpips = [v[LPIPS_MEAN.key] for v in per.values() if not math.isnan(v[LPIPS_MEAN.key])]
    strongest = max(per, key=lambda k: per[k][PSNR_MEAN.key])
    informed = [per[k][PSNR_MEAN.key] for k in INFORMED if k in per]
    return {"chance": per, "chance_strongest": strongest, "chance_images": pairs[strongest],
            PSNR_CHANCE.key: per[strongest][PSNR_MEAN.key],
            PSNR_CHANCE_UNINFORMED.key: max(per[k][PSNR_MEAN.key] for k in BASELINES),
            PSNR_CHANCE_INFORMED.key: max(informed) if informed else math.nan,
            SSIM_CHANCE.key: max(v[SSIM_MEAN.key] for v in per.values()),
            LPIPS_CHANCE.key: min(lpips) if lpips else math.nan,
            RECOVERED_FRACTION_CHANCE.key: max(v[RECOVERED_FRACTION.key] for v in per.values())}


def gains(privacy: dict[str, Any]) -> dict[str, float]:
    """How far the attack beats chance: ``psnr_gain``, ``ssim_gain`` (higher: more leaked), ``lpips_gain``
    (chance LPIPS minus the attack's; higher: more leaked), and the median image's ``psnr_median_gain`` where the
    median is scored.

    Example:
        >>> gains({"psnr_mean": 30.0, "psnr_chance": 12.5, "ssim_mean": 0.9, "ssim_chance": 0.2})["psnr_gain"]
        17.5
    """
    nan = math.nan
    out = {PSNR_GAIN.key: privacy.get(PSNR_MEAN.key, nan) - privacy.get(PSNR_CHANCE.key, nan),
           SSIM_GAIN.key: privacy.get(SSIM_MEAN.key, nan) - privacy.get(SSIM_CHANCE.key, nan),
           LPIPS_GAIN.key: privacy.get(LPIPS_CHANCE.key, nan) - privacy.get(LPIPS_MEAN.key, nan)}
    if PSNR_MEDIAN.key in privacy:
        out[PSNR_MEDIAN_GAIN.key] = privacy[PSNR_MEDIAN.key] - privacy.get(PSNR_CHANCE.key, nan)
    return out
