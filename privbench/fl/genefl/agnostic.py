"""An agnostic client's side: what it fine-tunes on, and its accuracy after fine-tuning from a given state."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from privbench.data import FederatedData, ImageDataset
from privbench.fl.genefl.settings import AgnosticSettings
from privbench.fl.sgd import State, client_accuracy, local_train, model_with


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
