"""An MLP, the data and the local loop."""
from __future__ import annotations

import io
from importlib import resources

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class TwoLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = nn.Linear(784, 32), nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x.flatten(1))))


def weights(net: nn.Module) -> list[np.ndarray]:
    return [v.detach().cpu().numpy() for v in net.state_dict().values()]


def set_weights(net: nn.Module, arrays: list[np.ndarray]) -> None:
    net.load_state_dict({k: torch.from_numpy(np.asarray(a)) for k, a in zip(net.state_dict(), arrays)})


def shard(pid: int, batch_size: int) -> tuple[DataLoader, DataLoader]:
    raw = resources.files("privbench.data").joinpath("assets", "fashion_mnist_subset.npz").read_bytes()
    with np.load(io.BytesIO(raw)) as d:
        out = []
        for split, lo, n in (("train", 4000 + 100 * pid, 100), ("test", (800 + 40 * pid) % 1000, 40)):
            x = torch.from_numpy(d[f"{split}_images"][lo:lo + n]).float().unsqueeze(1) / 255.0
            out.append(DataLoader(TensorDataset(x, torch.from_numpy(d[f"{split}_labels"][lo:lo + n].astype(np.int64))),
                                  batch_size=batch_size, shuffle=split == "train"))
    return out[0], out[1]


def fit(net: nn.Module, loader: DataLoader, epochs: int, lr: float) -> None:
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
