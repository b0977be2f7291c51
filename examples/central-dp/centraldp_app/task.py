"""A LeNet-style model, the data and the local loop."""
from __future__ import annotations

import io
from importlib import resources

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LeNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 6, 5), nn.Tanh(), nn.AvgPool2d(2), nn.Conv2d(6, 12, 5), nn.Tanh(),
                                  nn.AvgPool2d(2), nn.Flatten())
        self.head = nn.Linear(12 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def partition(partition_id: int, batch_size: int) -> tuple[DataLoader, DataLoader]:
    raw = resources.files("privbench.data").joinpath("assets", "fashion_mnist_subset.npz").read_bytes()
    with np.load(io.BytesIO(raw)) as data:
        def loader(split: str, start: int, size: int, shuffle: bool) -> DataLoader:
            x = torch.from_numpy(data[f"{split}_images"][start:start + size]).float().unsqueeze(1) / 255.0
            y = torch.from_numpy(data[f"{split}_labels"][start:start + size].astype(np.int64))
            return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=shuffle)
        return loader("train", 3000 + 120 * partition_id, 120, True), loader("test", 500 + 50 * partition_id, 50, False)


def local_sgd(net: nn.Module, loader: DataLoader, epochs: int, lr: float) -> None:
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
