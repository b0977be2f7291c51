"""A small ReLU CNN with GroupNorm (Opacus-compatible), the CPU default for training."""
from __future__ import annotations

import torch
from torch import nn

from privbench.schema import PositiveInt


def _block(cin: int, cout: int, groups: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(groups, cout), nn.ReLU(), nn.MaxPool2d(2)]


class ConvNet(nn.Module):
    """Two conv-GroupNorm-ReLU-pool blocks and a linear head.

    Example:
        >>> ConvNet(in_channels=3, image_size=32, num_classes=10)(torch.zeros(1, 3, 32, 32)).shape
        torch.Size([1, 10])
    """

    def __init__(self, *, in_channels: int, image_size: int, num_classes: int, width: PositiveInt = 32,
                 groups: int = 4) -> None:
        super().__init__()
        self.body = nn.Sequential(*_block(in_channels, width, groups), *_block(width, 2 * width, groups))
        side = image_size // 4
        self.fc = nn.Linear(2 * width * side * side, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x).flatten(1))
