"""Any ``torchvision.models`` architecture, fitted to the dataset's channels and image size."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from privbench.schema import Count


class InputAdapter(nn.Module):
    """Repeat grey images to the channels a model expects and upsample small images.

    Attributes:
        channels: channels the wrapped model's first layer takes.
        min_size: images with a side under this are upsampled bilinearly to it.
        model: the wrapped model.
    """

    def __init__(self, model: nn.Module, *, channels: int, min_size: int) -> None:
        super().__init__()
        self.model, self.channels, self.min_size = model, channels, min_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] != self.channels:
            x = x.repeat(1, self.channels // x.shape[1], 1, 1)
        if min(x.shape[-2:]) < self.min_size:
            x = F.interpolate(x, size=(self.min_size, self.min_size), mode="bilinear", align_corners=False)
        return self.model(x)


def torchvision_model(*, name: str, in_channels: int, image_size: int, num_classes: int, min_size: Count = 64,
                      **kwargs: Any) -> nn.Module:
    """``torchvision.models.get_model(name, weights=None, num_classes=...)`` with an ``InputAdapter``.

    Untrained, as the attacks assume (the audit trains it). Images smaller than
    ``min_size`` are upsampled so that ImageNet-stem models keep a spatial map through their last
    block (a batch-norm layer needs more than one value per channel at batch size 1).

    Example:
        >>> m = torchvision_model(name="resnet18", in_channels=1, image_size=28, num_classes=10)
        >>> m(torch.zeros(2, 1, 28, 28)).shape
        torch.Size([2, 10])
    """
    import torchvision

    model = torchvision.models.get_model(name, weights=None, num_classes=num_classes, **kwargs)
    first = next((m for m in model.modules() if isinstance(m, nn.Conv2d)), None)
    channels = first.in_channels if first is not None else in_channels
    if channels % in_channels:
        raise ValueError(f"{name} takes {channels} input channels; cannot repeat {in_channels} to fill them")
    return InputAdapter(model, channels=channels, min_size=max(min_size, 0) if image_size < min_size else 0)
