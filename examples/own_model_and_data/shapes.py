"""A map-style dataset of (image, label) pairs and a model factory, defined outside privbench."""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset

CLASSES = ("square", "cross", "ring")


class Shapes(Dataset):
    """16x16 grey images of a square outline, a cross or a ring at a random place (floats in [0, 1])."""

    def __init__(self, size: int = 300, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, len(CLASSES), (size,), generator=g)
        self.offsets = torch.randint(0, 6, (size, 2), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        image = torch.zeros(1, 16, 16)
        r, c = (int(v) for v in self.offsets[i])
        label = int(self.labels[i])
        yy, xx = torch.meshgrid(torch.arange(10.0), torch.arange(10.0), indexing="ij")
        if label == 0:
            shape = ((yy == 0) | (yy == 9) | (xx == 0) | (xx == 9)).float()
        elif label == 1:
            shape = ((yy - 4.5).abs() < 1.5).float().maximum(((xx - 4.5).abs() < 1.5).float())
        else:
            d = ((yy - 4.5) ** 2 + (xx - 4.5) ** 2).sqrt()
            shape = ((d > 2.5) & (d < 4.5)).float()
        image[0, r:r + 10, c:c + 10] = shape
        return image, label


def tiny_cnn(*, in_channels: int, num_classes: int, width: int = 8) -> nn.Module:
    """A model factory: privbench passes ``in_channels`` and ``num_classes`` because they are named here."""
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1), nn.Sigmoid(), nn.AvgPool2d(2),
        nn.Conv2d(width, width, 3, padding=1), nn.Sigmoid(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(width * 4 * 4, num_classes),
    )
