"""Agnostic clients: their fine-tuning settings (``fl.agnostic.*``), what they fine-tune on, and their accuracy
after fine-tuning from a given state."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from privbench.data import FederatedData, ImageDataset
from privbench.errors import ConfigError
from privbench.fl.sgd import State, client_accuracy, local_train, model_with
from privbench.schema import Count, PositiveInt, Rate, Switch


@dataclass(frozen=True)
class AgnosticSettings:
    """Agnostic clients' fine-tuning budget, and whether to train a FedAvg reference to compare.

    ``samples`` limits fine-tuning to that many of the client's images (0: all of them),
    the few-shot regime in which an initialisation matters.
    """

    epochs: Count = 1
    lr: Rate = 0.05
    batch_size: PositiveInt = 32
    samples: Count = 0
    fedavg_reference: Switch = True

    def __post_init__(self) -> None:
        if self.epochs < 0 or self.lr <= 0 or self.batch_size < 1 or self.samples < 0:
            raise ConfigError("fl.agnostic: epochs and samples must be >= 0, lr > 0, batch_size >= 1")


def tune_set(data: FederatedData, a: int, settings: AgnosticSettings, *, seed: int) -> ImageDataset:
    """What agnostic client ``a`` fine-tunes on: all its images, or ``settings.samples`` of them."""
    adata = data.client(a, agnostic=True)
    if settings.samples and settings.samples < len(adata):
        keep = np.sort(np.random.default_rng([seed, a, 31]).permutation(len(adata))[: settings.samples])
        return adata.subset(torch.from_numpy(keep))
    return adata


def finetuned_accuracy(model: nn.Module, state: State, data: FederatedData, a: int, settings: AgnosticSettings, *,
                       seed: int) -> float:
    """Agnostic client ``a``'s accuracy on the test images of its classes after fine-tuning from ``state``."""
    local = model_with(model, state)
    if settings.epochs:
        local_train(local, tune_set(data, a, settings, seed=seed), epochs=settings.epochs, lr=settings.lr,
                    batch_size=settings.batch_size, generator=torch.Generator().manual_seed(seed * 7919 + a))
    return client_accuracy(local, data.test_agnostic, data.client_classes(a, agnostic=True))[0]
