"""ResNet-18 with the CIFAR stem, BatchNorm or GroupNorm, and no in-place operations."""
from __future__ import annotations

import torch
from torch import nn

NORMS = ("bn", "gn")


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "bn":
        return nn.BatchNorm2d(channels)
    if kind == "gn":
        return nn.GroupNorm(min(32, channels), channels)
    raise ValueError(f"model.norm={kind!r} is not one of {', '.join(NORMS)}")


class BasicBlock(nn.Module):
    """Two 3x3 convs with a (projected) identity shortcut; ``out = out + identity``, never ``+=``."""

    def __init__(self, cin: int, cout: int, stride: int, norm: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = _norm(norm, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = _norm(norm, cout)
        self.relu = nn.ReLU(inplace=False)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), _norm(norm, cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 for small images: 3x3 stride-1 stem, no max-pool.

    Example:
        >>> ResNet18(in_channels=3, image_size=32, num_classes=10, norm="gn")(torch.zeros(1, 3, 32, 32)).shape
        torch.Size([1, 10])
    """

    def __init__(self, *, in_channels: int, image_size: int, num_classes: int, norm: str = "bn") -> None:
        super().__init__()
        del image_size  # global pooling makes the head size-independent
        self.conv1 = nn.Conv2d(in_channels, 64, 3, padding=1, bias=False)
        self.bn1 = _norm(norm, 64)
        self.relu = nn.ReLU(inplace=False)
        layers, cin = [], 64
        for i, cout in enumerate((64, 128, 256, 512)):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride, norm), BasicBlock(cout, cout, 1, norm)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.pool(x).flatten(1))
