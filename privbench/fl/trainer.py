"""Trainers: the only way a protocol trains a client; each training returns a record the wire checks."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from privbench.data.dataset import ImageDataset
from privbench.fl.sgd import batch_gradient, local_train
from privbench.payloads.training import LocalTraining


@dataclass(frozen=True)
class LocalSGD:
    """A protocol's local optimiser settings.

    Attributes:
        epochs: local epochs per round.
        lr: SGD learning rate.
        batch_size: local batch size.
        momentum: SGD momentum.
    """

    epochs: int
    lr: float
    batch_size: int
    momentum: float = 0.0


class Regulariser(Protocol):
    """A data-independent penalty added to the local loss (GENE-FL's ``lambda1``/``lambda2`` terms)."""

    @property
    def lambda1(self) -> float: ...
    @property
    def lambda2(self) -> float: ...
    @property
    def eps(self) -> float: ...

    def __call__(self, model: nn.Module) -> torch.Tensor: ...


class Trainer(ABC):
    """Trains clients and computes victim gradients; every result carries a record it issued.

    A protocol receives its trainer at construction. The wire refuses a client upload whose
    training record this trainer did not issue, so a protocol that trains some other way
    fails instead of sending undefended messages.
    """

    name = "trainer"

    def __init__(self) -> None:
        self._issued: dict[int, LocalTraining] = {}
        self._reads: dict[str, str | None] = {}

    def _issue(self, record: LocalTraining) -> LocalTraining:
        self._issued[id(record)] = record
        return record

    def issued(self, record: LocalTraining | None) -> bool:
        """Whether ``record`` came from this trainer."""
        return record is not None and self._issued.get(id(record)) is record

    def train(self, model: nn.Module, data: ImageDataset, *, client: str, sgd: LocalSGD, generator: torch.Generator,
              max_steps: int, regulariser: Regulariser | None = None) -> LocalTraining:
        """Train ``model`` in place on ``data``; return the record of what was done.

        Args:
            model: the client's model, trained in place.
            data: the client's data this round.
            client: the client's name (per-client accounting).
            sgd: the protocol's local optimiser settings.
            generator: the client's batch-order generator.
            max_steps: most steps the client takes in the run (an accounting bound).
            regulariser: a data-independent penalty added to the loss.
        """
        steps = self._train(model, data, client=client, sgd=sgd, generator=generator, max_steps=max_steps,
                            regulariser=regulariser)
        lambda1, lambda2, eps = (regulariser.lambda1, regulariser.lambda2, regulariser.eps) if regulariser else (0, 0, 0)
        return self._issue(LocalTraining(lr=sgd.lr, steps=steps, batch_size=sgd.batch_size, num_samples=len(data),
                                         epochs=sgd.epochs, momentum=sgd.momentum, lambda1=lambda1, lambda2=lambda2,
                                         eps=eps))

    def gradient(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, client: str, num_samples: int, lr: float,
                 generator: torch.Generator, max_steps: int) -> tuple[dict[str, torch.Tensor], LocalTraining]:
        """One step's gradient on the batch ``(x, y)`` at ``model``, and its record."""
        grads = self._gradient(model, x, y, client=client, num_samples=num_samples, generator=generator,
                               max_steps=max_steps)
        return grads, self._issue(LocalTraining(lr=lr, steps=1, batch_size=len(x), num_samples=len(x)))

    def declare_read(self, what: str, *, mechanism: str | None) -> None:
        """Record a read of private data outside ``train``/``gradient`` (``mechanism=None``: not protected)."""
        self._reads[what] = mechanism

    def uncovered_reads(self) -> list[str]:
        """Declared reads no mechanism protects."""
        return sorted(k for k, v in self._reads.items() if v is None)

    def check_model(self, model: nn.Module) -> None:
        """Fail before training if this trainer cannot train ``model``."""

    @abstractmethod
    def _train(self, model: nn.Module, data: ImageDataset, *, client: str, sgd: LocalSGD, generator: torch.Generator,
               max_steps: int, regulariser: Regulariser | None) -> int:
        """Train in place; return the optimiser steps taken."""

    @abstractmethod
    def _gradient(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, client: str, num_samples: int,
                  generator: torch.Generator, max_steps: int) -> dict[str, torch.Tensor]:
        """The gradient released for one batch."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Settings and accounting recorded with the results."""


class SGDTrainer(Trainer):
    """Plain local SGD (no privacy mechanism): the trainer of undefended and payload-defended runs.

    Example:
        >>> SGDTrainer().describe()
        {'trainer': 'sgd'}
    """

    name = "sgd"

    def _train(self, model: nn.Module, data: ImageDataset, *, client: str, sgd: LocalSGD, generator: torch.Generator,
               max_steps: int, regulariser: Regulariser | None) -> int:
        return local_train(model, data, epochs=sgd.epochs, lr=sgd.lr, batch_size=sgd.batch_size, momentum=sgd.momentum,
                           generator=generator, regulariser=regulariser)

    def _gradient(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, client: str, num_samples: int,
                  generator: torch.Generator, max_steps: int) -> dict[str, torch.Tensor]:
        return batch_gradient(model, x, y)

    def describe(self) -> dict[str, Any]:
        return {"trainer": self.name}
