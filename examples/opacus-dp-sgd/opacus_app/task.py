"""The model (no batch norm: DP-SGD needs per-sample gradients), the data and the loops."""
from __future__ import annotations

import io
from importlib import resources

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 6, 5, stride=2), nn.ReLU(), nn.Conv2d(6, 12, 3, stride=2), nn.ReLU())
        self.classifier = nn.Linear(12 * 5 * 5, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


def load_data(partition_id: int, num_partitions: int, batch_size: int) -> tuple[DataLoader, DataLoader]:
    raw = resources.files("privbench.data").joinpath("assets", "fashion_mnist_subset.npz").read_bytes()
    loaders = []
    with np.load(io.BytesIO(raw)) as data:
        for split, per in (("train", 256), ("test", 128)):
            rows = np.arange(len(data[f"{split}_labels"]))[partition_id::num_partitions][:per]
            x = (torch.from_numpy(data[f"{split}_images"][rows]).float().unsqueeze(1) / 255.0 - 0.2860) / 0.3530
            loaders.append(DataLoader(TensorDataset(x, torch.from_numpy(data[f"{split}_labels"][rows].astype(np.int64))),
                                      batch_size=batch_size, shuffle=split == "train"))
    return loaders[0], loaders[1]


def test(net: nn.Module, loader: DataLoader) -> tuple[float, float]:
    net.eval()
    loss, hits = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            out = net(x)
            loss += F.cross_entropy(out, y, reduction="sum").item()
            hits += int((out.argmax(1) == y).sum())
    return loss / len(loader.dataset), hits / len(loader.dataset)
