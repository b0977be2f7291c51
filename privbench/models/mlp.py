"""The fully connected ReLU network of FedAvg's MNIST experiments (McMahan et al. 2017, "2NN")."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class MLP(nn.Module):
    """``flatten -> (Linear -> ReLU) x len(hidden) -> fc``; FedAvg's 2NN has ``hidden=(200, 200)``.

    PyTorch's default initialisation. Its first layer sees the flattened input, as the trap weights of Boenisch et
    al. (2023) need.

    Example:
        >>> MLP(in_channels=1, image_size=28, num_classes=10)(torch.zeros(2, 1, 28, 28)).shape
        torch.Size([2, 10])
    """

    def __init__(self, *, in_channels: int, image_size: int, num_classes: int,
                 hidden: Sequence[int] = (200, 200)) -> None:
        super().__init__()
        if not hidden or any(int(h) < 1 for h in hidden):
            raise ValueError(f"model.hidden must list at least one width >= 1, not {list(hidden)}")
        widths = [in_channels * image_size * image_size, *(int(h) for h in hidden)]
        blocks: list[nn.Module] = [nn.Flatten()]
        for cin, cout in zip(widths, widths[1:]):
            blocks += [nn.Linear(cin, cout), nn.ReLU()]
        self.body = nn.Sequential(*blocks)
        self.fc = nn.Linear(widths[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))
