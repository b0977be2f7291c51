"""The model (with batch norm), get/set weights as a list of arrays, the data and the loops."""
from __future__ import annotations

import io
from collections import OrderedDict
from importlib import resources

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 6, 5)
        self.bn = nn.BatchNorm2d(6)
        self.fc = nn.Linear(6 * 12 * 12, 10)

    def forward(self, x):
        return self.fc(F.max_pool2d(F.relu(self.bn(self.conv(x))), 2).flatten(1))


def get_weights(net):
    return [val.cpu().numpy() for _, val in net.state_dict().items()]


def set_weights(net, parameters):
    state_dict = OrderedDict({k: torch.tensor(v) for k, v in zip(net.state_dict().keys(), parameters)})
    net.load_state_dict(state_dict, strict=True)


def load_data(partition_id, num_partitions, batch_size):
    raw = resources.files("privbench.data").joinpath("assets", "fashion_mnist_subset.npz").read_bytes()
    out = []
    with np.load(io.BytesIO(raw)) as d:
        for split, per in (("train", 160), ("test", 80)):
            rows = np.arange(partition_id * per, (partition_id + 1) * per) + 2000 * (split == "train")
            x = torch.from_numpy(d[f"{split}_images"][rows]).float().unsqueeze(1) / 255.0
            y = torch.from_numpy(d[f"{split}_labels"][rows].astype(np.int64))
            out.append(DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=split == "train"))
    return out


def train(net, loader, epochs, lr):
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    net.train()
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()


def test(net, loader):
    net.eval()
    loss = correct = 0.0
    with torch.no_grad():
        for x, y in loader:
            out = net(x)
            loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
    return loss / len(loader.dataset), correct / len(loader.dataset)
