"""Client-side computation: local SGD epochs, one-batch gradients, accuracy, model states."""
from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from privbench.data import FederatedData
from privbench.data.dataset import ImageDataset

#: A model's state by name (``state_dict`` entries).
State = dict[str, torch.Tensor]


def parameters_of(model: nn.Module) -> State:
    """Detached CPU copies of the model's named parameters and buffers (its state; states live on the CPU,
    models on their device)."""
    return {name: t.detach().to("cpu", copy=True) for name, t in model.state_dict().items()}


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


def per_sample_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *,
                         clip: float | None = None) -> dict[str, torch.Tensor]:
    """Each sample's cross-entropy gradient (``[N, *shape]`` per parameter name), by ``torch.func.vmap``.

    With ``clip``, each sample's gradient is scaled to L2 norm at most ``clip`` over all
    parameters (DP-SGD's per-sample clipping). The model is used in its current mode.
    """
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = {n: b.detach() for n, b in model.named_buffers()}

    def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, (p, buffers), (xi.unsqueeze(0),)), yi.unsqueeze(0))

    grads: dict[str, torch.Tensor] = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    if clip is None:
        return grads
    norms = torch.sqrt(cast(torch.Tensor, sum((g.flatten(1) ** 2).sum(1) for g in grads.values())))
    factor = (clip / (norms + 1e-6)).clamp(max=1.0)
    return {n: g * factor.view(-1, *[1] * (g.dim() - 1)) for n, g in grads.items()}


class Penalty(Protocol):
    """A penalty that reads no data and adds its own gradient (GENE-FL's ``GeneRegulariser``), or with
    ``step=proximal`` takes its proximal map after each step."""

    @property
    def step(self) -> str:
        """``gradient`` or ``proximal``: how SGD takes the penalty."""

    def __call__(self, model: nn.Module) -> torch.Tensor:
        """The penalty's value at ``model`` (differentiable)."""

    def add_gradient_(self, model: nn.Module) -> None:
        """Add the penalty's gradient at ``model`` to each parameter's ``.grad``."""

    def after_step_(self, model: nn.Module, lr: float) -> None:
        """Take the penalty by its proximal map after an optimiser step of size ``lr`` (where it does so)."""


def backpropagated_penalty_(model: nn.Module, penalty: Penalty) -> None:
    """Add ``d penalty / d theta``, by autograd, to each parameter's ``.grad`` (after DP-SGD has set it), unless
    the penalty is taken by its proximal map after the step."""
    if penalty.step != "gradient":
        return
    params = [p for p in model.parameters() if p.requires_grad]
    for p, g in zip(params, torch.autograd.grad(penalty(model), params, allow_unused=True)):
        if g is not None:
            p.grad = g if p.grad is None else p.grad + g


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
    regulariser: Penalty | None = None,
) -> int:
    """Train ``model`` in place with SGD on cross-entropy plus ``regulariser`` (its gradient added each step).

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
            F.cross_entropy(model(x_all[idx]), y_all[idx]).backward()
            if regulariser is not None:
                regulariser.add_gradient_(model)
            optimizer.step()
            if regulariser is not None:
                regulariser.after_step_(model, lr)
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


def known_accuracy(model: nn.Module, data: FederatedData,
                   state_of: Callable[[int], State]) -> tuple[float, dict[int, float]]:
    """Pooled accuracy over known clients, each scored with ``state_of(client)`` on its own classes,
    and each client's own accuracy (NaN for a client none of whose classes the test split holds: ``victim.photos``)."""
    correct = total = 0.0
    per_client: dict[int, float] = {}
    for c in range(data.num_clients):
        model.load_state_dict(state_of(c))
        acc, n = client_accuracy(model, data.test, data.client_classes(c))
        per_client[c] = acc if n else math.nan
        correct, total = correct + acc * n, total + n
    return correct / max(total, 1), per_client
