"""The model, the data loading and the training loop of the quickstart."""
from __future__ import annotations

import io
from importlib import resources

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    """A small CNN for 28x28 grey images."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.fc = nn.Linear(16 * 5 * 5, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def _split(name: str) -> tuple[np.ndarray, np.ndarray]:
    # Fashion-MNIST as installed on this machine (the subset privbench ships inside its package)
    raw = resources.files("privbench.data").joinpath("assets", "fashion_mnist_subset.npz").read_bytes()
    with np.load(io.BytesIO(raw)) as arrays:
        return arrays[f"{name}_images"].copy(), arrays[f"{name}_labels"].astype(np.int64)


def load_data(partition_id: int, num_partitions: int, batch_size: int, per_client: int = 200,
              dominant_share: float = 0.0) -> tuple[DataLoader, DataLoader]:
    """This node's share of the train and test splits, normalised to [-1, 1]: IID, or (label skew) with
    ``dominant_share`` of its records from class ``partition_id % 10``, drawn from records no IID share holds."""
    loaders = []
    for name, size, shuffle in (("train", per_client, True), ("test", max(per_client // 2, 10), False)):
        images, labels = _split(name)
        order = np.random.default_rng(42).permutation(len(images))
        skew = int(round(dominant_share * size))
        mine = order[partition_id * size:(partition_id + 1) * size - skew]
        if skew:
            spare = order[num_partitions * size:]
            pool = spare[labels[spare] == partition_id % 10][(partition_id // 10) * skew:][:skew]
            if len(pool) < skew:
                raise ValueError(f"dominant-share={dominant_share}: the {name} split has {len(pool)} spare records "
                                 f"of class {partition_id % 10}, not {skew}")
            mine = np.concatenate([mine, pool])
        x = (torch.from_numpy(images[mine]).float().unsqueeze(1) / 255.0 - 0.5) / 0.5
        y = torch.from_numpy(labels[mine])
        loaders.append(DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=shuffle))
    return loaders[0], loaders[1]


def train(net: nn.Module, loader: DataLoader, epochs: int, lr: float) -> float:
    """Plain SGD over the loader; the mean training loss."""
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    net.train()
    total, batches = 0.0, 0
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
    return total / max(batches, 1)


def test(net: nn.Module, loader: DataLoader) -> tuple[float, float]:
    """Loss and accuracy on the loader."""
    net.eval()
    loss, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            out = net(x)
            loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += int((out.argmax(1) == y).sum())
            n += len(y)
    return loss / n, correct / n
