"""Client-side computation: local SGD epochs, one-batch gradients, accuracy, model states."""
from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from privbench.data.dataset import ImageDataset

#: A model's state by name (``state_dict`` entries).
State = dict[str, torch.Tensor]


def parameters_of(model: nn.Module) -> State:
    """Detached copies of the model's named parameters and floating buffers (its state)."""
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def model_with(model: nn.Module, state: State) -> nn.Module:
    """A copy of ``model`` holding ``state``."""
    local = copy.deepcopy(model)
    local.load_state_dict(state)
    return local


def batch_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gradient of the mean cross-entropy on ``(x, y)`` for every named parameter."""
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    names, params = zip(*[(n, p) for n, p in model.named_parameters() if p.requires_grad])
    grads = torch.autograd.grad(loss, params)
    return {n: g.detach().clone() for n, g in zip(names, grads)}


def local_steps(num_samples: int, *, epochs: int, batch_size: int) -> int:
    """Number of SGD steps ``local_train`` takes."""
    return epochs * math.ceil(num_samples / batch_size)


def local_train(
    model: nn.Module,
    data: ImageDataset,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    momentum: float = 0.0,
    generator: torch.Generator,
    regulariser: Callable[[nn.Module], torch.Tensor] | None = None,
) -> int:
    """Train ``model`` in place with SGD on cross-entropy (+ ``regulariser(model)``).

    Batches are reshuffled each epoch with ``generator``; the last batch may be smaller.
    Returns the number of SGD steps.
    """
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    x_all, y_all = data.normalised(), data.labels
    steps = 0
    for _ in range(epochs):
        order = torch.randperm(len(data), generator=generator)
        for start in range(0, len(data), batch_size):
            idx = order[start : start + batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
            if regulariser is not None:
                loss = loss + regulariser(model)
            loss.backward()
            optimizer.step()
            steps += 1
    return steps


@torch.no_grad()
def accuracy(model: nn.Module, data: ImageDataset, *, batch_size: int = 1000) -> float:
    """Top-1 accuracy of ``model`` on ``data``."""
    model.eval()
    correct = 0
    for start in range(0, len(data), batch_size):
        x = data.normalised(slice(start, start + batch_size))
        correct += int((model(x).argmax(1) == data.labels[start : start + batch_size]).sum())
    model.train()
    return correct / max(len(data), 1)


def client_accuracy(model: nn.Module, test: ImageDataset, classes: list[int]) -> tuple[float, int]:
    """Accuracy of ``model`` on the test samples whose label is in ``classes``, and their count."""
    subset = test.with_classes(classes)
    return accuracy(model, subset), len(subset)
