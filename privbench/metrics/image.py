"""Per-image reconstruction metrics on [0, 1] images: MSE, PSNR, SSIM (scikit-image)."""
from __future__ import annotations

import math

import numpy as np
import torch
from skimage.metrics import structural_similarity


def _hwc(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().double().permute(1, 2, 0).numpy()


def mse(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean squared error of two ``[C, H, W]`` images in [0, 1]."""
    return float(((a.double() - b.double()) ** 2).mean())


PSNR_CEILING = 10 * math.log10(12 * 255**2)
"""58.92 dB: the PSNR of rounding an image to 8 bits (error variance (1/255)^2 / 12). The victims' images are
8-bit; a reconstruction closer than that is a copy exact to their pixel grid, and what lies beyond is the
attack's float round-off, not more leakage, so PSNR is reported up to here."""


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """PSNR in dB (data range 1) of reconstruction ``a`` against ground truth ``b``, at most ``PSNR_CEILING``."""
    error = mse(a, b)
    return PSNR_CEILING if error == 0.0 else min(10 * math.log10(1.0 / error), PSNR_CEILING)


def ssim(a: torch.Tensor, b: torch.Tensor) -> float:
    """SSIM (data range 1, Gaussian-free 7x7 window or the largest odd one that fits)."""
    side = min(a.shape[-2:])
    win = min(7, side if side % 2 else side - 1)
    return float(structural_similarity(_hwc(b), _hwc(a), data_range=1.0, channel_axis=2, win_size=win))
