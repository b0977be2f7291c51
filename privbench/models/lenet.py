"""The LeNet of the DLG paper: three 5x5 sigmoid convs with 12 channels and one linear head."""
from __future__ import annotations

import torch
from torch import nn

from privbench.schema import PositiveInt


class LeNet(nn.Module):
    """DLG's LeNet (Zhu et al., 2019) for any input size.

    Weights and biases are drawn from uniform(-0.5, 0.5), as in the DLG code: the
    sigmoid network is twice differentiable, which gradient matching needs.

    Example:
        >>> LeNet(in_channels=1, image_size=28, num_classes=10)(torch.zeros(2, 1, 28, 28)).shape
        torch.Size([2, 10])
    """

    def __init__(self, *, in_channels: int, image_size: int, num_classes: int, width: PositiveInt = 12) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, width, 5, padding=2, stride=2),
            nn.Sigmoid(),
            nn.Conv2d(width, width, 5, padding=2, stride=2),
            nn.Sigmoid(),
            nn.Conv2d(width, width, 5, padding=2, stride=1),
            nn.Sigmoid(),
        )
        side = (image_size + 1) // 2
        side = (side + 1) // 2
        self.fc = nn.Linear(width * side * side, num_classes)
        for p in self.parameters():
            nn.init.uniform_(p, -0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x).flatten(1))
