"""LPIPS (AlexNet) with the real ImageNet backbone shipped with privbench, never random."""
from __future__ import annotations

import warnings
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F

from privbench.metrics.lpips_weights import alexnet_backbone

MIN_SIDE = 64


@lru_cache(maxsize=1)
def lpips_network() -> Any:
    """The ``lpips.LPIPS(net='alex')`` network with the shipped ImageNet backbone and LPIPS v0.1 heads."""
    import lpips

    state, source = alexnet_backbone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = lpips.LPIPS(net="alex", pretrained=True, pnet_rand=True, verbose=False)
    missing = net.net.load_state_dict(state, strict=True)
    assert not missing.missing_keys and not missing.unexpected_keys
    net.eval().requires_grad_(False)
    net.source = source
    return net


def lpips_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """LPIPS between two ``[C, H, W]`` images in [0, 1].

    Grey images are repeated to three channels; images with a side under 64 px are
    upsampled bilinearly to 64 px first (AlexNet's pooling needs that much).
    """
    net = lpips_network()
    pair = torch.stack([a, b]).float()
    if pair.shape[1] == 1:
        pair = pair.repeat(1, 3, 1, 1)
    if min(pair.shape[-2:]) < MIN_SIDE:
        scale = MIN_SIDE / min(pair.shape[-2:])
        size = (round(pair.shape[-2] * scale), round(pair.shape[-1] * scale))
        pair = F.interpolate(pair, size=size, mode="bilinear", align_corners=False)
    with torch.no_grad():
        return float(net(pair[:1], pair[1:], normalize=True).flatten()[0])
