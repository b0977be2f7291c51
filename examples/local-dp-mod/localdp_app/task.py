"""An MLP, the data loading and the training loop."""
from __future__ import annotations

import io
import tomllib
from importlib import resources
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

#: The app's privacy settings, read where Flower reads the rest of its config (mods are built at import).
SETTINGS = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(28 * 28, 64)
        self.out = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.hidden(x.flatten(1))))


def load_data(partition: int, partitions: int, batch_size: int) -> tuple[DataLoader, DataLoader]:
    """A contiguous share of each split (pixels scaled to [0, 1])."""
    raw = resources.files("privbench.data").joinpath("assets", "fashion_mnist_subset.npz").read_bytes()
    out = []
    with np.load(io.BytesIO(raw)) as arrays:
        for split, size in (("train", 150), ("test", 60)):
            lo = (1000 if split == "train" else 0) + partition * size
            x = torch.from_numpy(arrays[f"{split}_images"][lo:lo + size]).float().unsqueeze(1) / 255.0
            y = torch.from_numpy(arrays[f"{split}_labels"][lo:lo + size].astype(np.int64))
            out.append(DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=split == "train"))
    return out[0], out[1]


def fit(net: nn.Module, loader: DataLoader, epochs: int, lr: float) -> None:
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()


def accuracy(net: nn.Module, loader: DataLoader) -> float:
    with torch.no_grad():
        hits = sum(int((net(x).argmax(1) == y).sum()) for x, y in loader)
    return hits / len(loader.dataset)
