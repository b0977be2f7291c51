"""Trainers: the only way a protocol reads a client's private data; each read is recorded with its protection."""
from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from privbench.data.dataset import ImageDataset
from privbench.fl.clustering.subspace import client_subspace, per_class_subspace
from privbench.fl.fisher import fisher_diagonal
from privbench.fl.reads import AUDIT_GRADIENT, FISHER, LOCAL_SGD, READS, SUBSPACE, PlannedRead, Read
from privbench.fl.sgd import accuracy, batch_gradient, local_steps, local_train
from privbench.fl.vectorised import LocalJob, stacked_local_train, why_not_stacked
from privbench.payloads.training import LocalTraining

log = logging.getLogger("privbench")
#: The longest report (JSON characters) a remote client's reply may carry.
MAX_REPORT = 100_000
#: Reasons for one-by-one training already logged in this process (each is logged once).
_STACKED_WARNED: set[str] = set()


def _one_by_one(why: str) -> None:
    """Log once per process why ``fl.vectorise`` trains clients one by one."""
    if why not in _STACKED_WARNED:
        _STACKED_WARNED.add(why)
        log.info("fl.vectorise: clients train one by one: %s", why)


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
    """A penalty added to the local loss that reads no data (a protocol's own, e.g. GENE-FL's Fisher-elastic one).

    ``penalty(params, tensors())`` is the same value as ``regulariser(model)``, written
    functionally so that several clients' penalties can be vmapped together. ``settings()``
    are its declared weights (recorded in the training record); ``proximal()`` is the weight
    ``mu`` of a data-independent term ``mu ||theta - anchor||^2`` it contains (0: none), which an
    attacker who knows the settings can replay. Its ``step`` says how SGD takes it: ``gradient`` (its gradient
    joins the loss's, ``add_gradient_``) or ``proximal`` (its proximal map after the step, ``after_step_``).
    """

    @property
    def step(self) -> str: ...

    def settings(self) -> dict[str, float]: ...
    def proximal(self) -> float: ...

    def tensors(self) -> dict[str, dict[str, torch.Tensor]]: ...
    def penalty(self, params: Mapping[str, torch.Tensor],
                tensors: dict[str, dict[str, torch.Tensor]]) -> torch.Tensor: ...
    def __call__(self, model: nn.Module) -> torch.Tensor: ...
    def add_gradient_(self, model: nn.Module) -> None: ...
    def after_step_(self, model: nn.Module, lr: float) -> None: ...


class Trainer(ABC):
    """Every read of a client's data goes through a trainer, which records how it was protected.

    A protocol receives its trainer at construction and plans each client's reads with
    ``plan`` before its first round (a DP trainer calibrates its noise to that plan). The
    wire refuses a client upload whose training record this trainer did not issue, so a
    protocol that trains some other way fails instead of sending undefended messages.
    """

    name = "trainer"

    def __init__(self) -> None:
        self._issued: dict[int, LocalTraining] = {}
        self._reads: dict[str, Read] = {}
        self._unreported: list[str] = []

    def _issue(self, record: LocalTraining) -> LocalTraining:
        self._issued[id(record)] = record
        return record

    def issued(self, record: LocalTraining | None) -> bool:
        """Whether ``record`` came from this trainer."""
        return record is not None and self._issued.get(id(record)) is record

    def plan(self, client: str, reads: Sequence[PlannedRead]) -> None:
        """The reads ``client`` makes if it joins every round (plain training needs no plan)."""

    def planned_steps(self, n: int, sgd: LocalSGD) -> int:
        """The optimiser steps ``train`` takes on ``n`` samples under ``sgd`` (plain SGD: ``epochs * ceil(n / B)``)."""
        return local_steps(n, epochs=sgd.epochs, batch_size=sgd.batch_size)

    def train(self, model: nn.Module, data: ImageDataset, *, client: str, sgd: LocalSGD, generator: torch.Generator,
              regulariser: Regulariser | None = None) -> LocalTraining:
        """Train ``model`` in place on ``data``; return the record of what was done.

        Args:
            model: the client's model, trained in place.
            data: the client's data this round.
            client: the client's name (per-client accounting).
            sgd: the protocol's local optimiser settings.
            generator: the client's batch-order generator.
            regulariser: a penalty added to the loss that reads no data.
        """
        steps = self._train(model, data, client=client, sgd=sgd, generator=generator, regulariser=regulariser)
        return self._trained(data, steps=steps, sgd=sgd, regulariser=regulariser)

    def train_all(self, jobs: Sequence[LocalJob], *, sgd: LocalSGD, vectorise: bool = True) -> list[LocalTraining]:
        """Train each job's model in place; with ``vectorise``, all in one stacked model where this trainer can.

        Stacked training equals one-by-one training within float tolerance
        (``stacked_local_train``). It falls back to one by one, logging why, for a trainer
        without it (DP-SGD) or models that cannot be stacked (batch norm, dropout).
        """
        if not jobs:
            return []
        steps = self._train_stacked(jobs, sgd=sgd) if vectorise and len(jobs) > 1 else None
        if steps is None:
            return [self.train(j.model, j.data, client=j.client, sgd=sgd, generator=j.generator,
                               regulariser=j.regulariser) for j in jobs]
        return [self._trained(j.data, steps=n, sgd=sgd, regulariser=j.regulariser) for j, n in zip(jobs, steps)]

    def _trained(self, data: ImageDataset, *, steps: int, sgd: LocalSGD,
                 regulariser: Regulariser | None) -> LocalTraining:
        self.declare_read(LOCAL_SGD, **self._protection(LOCAL_SGD))
        penalty, proximal = (regulariser.settings(), regulariser.proximal()) if regulariser else ({}, 0.0)
        return self._issue(LocalTraining(lr=sgd.lr, steps=steps, batch_size=sgd.batch_size, num_samples=len(data),
                                         epochs=sgd.epochs, momentum=sgd.momentum, penalty=penalty,
                                         proximal=proximal, clip=self.clip_norm))

    def _train_stacked(self, jobs: Sequence[LocalJob], *, sgd: LocalSGD) -> list[int] | None:
        """Train all jobs as one stacked model and return their steps, or None where this trainer cannot."""
        _one_by_one(f"the {self.name} trainer has no stacked form")
        return None

    def gradient(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, client: str, lr: float,
                 generator: torch.Generator) -> tuple[dict[str, torch.Tensor], LocalTraining]:
        """One step's gradient on the batch ``(x, y)`` at ``model``, and its record."""
        grads = self._gradient(model, x, y, client=client, generator=generator)
        self.declare_read(AUDIT_GRADIENT, **self._protection(AUDIT_GRADIENT))
        return grads, self._issue(LocalTraining(lr=lr, steps=1, batch_size=len(x), num_samples=len(x),
                                                clip=self.clip_norm))

    def fisher(self, model: nn.Module, data: ImageDataset, *, client: str,
               generator: torch.Generator) -> dict[str, torch.Tensor]:
        """GENE-FL's diagonal Fisher of ``model`` on ``data`` (exact unless a DP trainer protects it)."""
        self.declare_read(FISHER, **self._protection(FISHER))
        return self._fisher(model, data, client=client, generator=generator)

    def subspace(self, images: torch.Tensor, d: int, *, client: str, generator: torch.Generator,
                 labels: torch.Tensor | None = None) -> torch.Tensor:
        """The client's data subspace ``U``, exact unless a DP trainer protects it.

        Top-``d`` directions of all images, or with ``labels`` of each class (PACFL), concatenated.
        """
        self.declare_read(SUBSPACE, **self._protection(SUBSPACE))
        return self._subspace(images, d, labels=labels, client=client, generator=generator)

    #: The per-sample clip norm this trainer applies to every gradient it releases (None: none), declared in
    #: the training records it issues (under DP-SGD the norm is public; a clip-aware attack uses it).
    clip_norm: float | None = None

    def local_accuracy(self, model: nn.Module, data: ImageDataset, *, client: str, read: str) -> float:
        """Accuracy of ``model`` on a client's own data: a read (``read``) no trainer protects."""
        self.declare_read(read, **self._protection(read))
        return accuracy(model, data)

    def declare_read(self, what: str, *, mechanism: str, covered: bool) -> None:
        """Record a read of private data and how it is protected."""
        self._reads[what] = Read(what, mechanism, covered)
        if what not in self._unreported:
            self._unreported.append(what)

    def take_report(self, client: str) -> str:
        """On a remote client (a Flower ClientApp): what its reply reports of the reads made since the last report,
        as JSON (``reads``: their names; a DP trainer adds its accountant's events); the record restarts empty."""
        return json.dumps(self._report(client))

    def _report(self, client: str) -> dict[str, Any]:
        report: dict[str, Any] = {"reads": self._unreported}
        self._unreported = []
        return report

    def compose_report(self, client: str, report: str | None, *, planned: Sequence[PlannedRead]) -> dict[str, Any]:
        """On the server: check a remote client's report against the reads the server ``planned`` for the task it
        answers, and record those reads as this trainer's own (protected as this trainer's settings protect them,
        whatever the client claims); the parsed report.

        Raises:
            ValueError: the reason, for a missing, oversized or malformed report, a read no trainer makes, or reads
                other than the planned ones (a client that leaves out a read would hide it from the report).
        """
        if report is None:
            raise ValueError("it sent no record of the reads it made")
        if not isinstance(report, str) or len(report) > MAX_REPORT:
            raise ValueError(f"its record of reads is not a JSON text of at most {MAX_REPORT:,} characters")
        try:
            parsed = json.loads(report)
        except ValueError:
            raise ValueError("its record of reads is not JSON") from None
        if not isinstance(parsed, dict) or not set(parsed) <= {"reads", "events"} or \
                not isinstance(parsed.get("reads"), list):
            raise ValueError("its record of reads is not {'reads': [...]} (with a DP trainer's 'events')")
        unknown = [r for r in parsed["reads"] if r not in READS]
        if unknown:
            raise ValueError(f"it reports a read {str(unknown[0])[:40]!r}; reads are {', '.join(READS)}")
        expected = sorted({r.what for r in planned})
        if sorted(set(parsed["reads"])) != expected:
            raise ValueError(f"it reports the reads {sorted(set(parsed['reads']))}; the server planned "
                             f"{expected} for {client}'s task")
        for what in dict.fromkeys(parsed["reads"]):  # in the order the client made them, as in process
            self.declare_read(what, **self._protection(what))
        return parsed

    def reads(self) -> list[Read]:
        """Every read made so far, in the order first made."""
        return list(self._reads.values())

    def uncovered_reads(self) -> list[str]:
        """Reads that no accounted mechanism protects."""
        return [r.what for r in self._reads.values() if not r.covered]

    def check_model(self, model: nn.Module) -> None:
        """Fail before training if this trainer cannot train ``model``."""

    def _protection(self, what: str) -> dict[str, Any]:
        """``mechanism`` and ``covered`` of a read (none by default)."""
        return {"mechanism": "none", "covered": False}

    def _fisher(self, model: nn.Module, data: ImageDataset, *, client: str,
                generator: torch.Generator) -> dict[str, torch.Tensor]:
        return fisher_diagonal(model, data)

    def _subspace(self, images: torch.Tensor, d: int, *, labels: torch.Tensor | None, client: str,
                  generator: torch.Generator) -> torch.Tensor:
        if labels is None:
            return client_subspace(images, d)
        return per_class_subspace(images, labels, d, client_subspace)

    @abstractmethod
    def _train(self, model: nn.Module, data: ImageDataset, *, client: str, sgd: LocalSGD, generator: torch.Generator,
               regulariser: Regulariser | None) -> int:
        """Train in place; return the optimiser steps taken."""

    @abstractmethod
    def _gradient(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, client: str,
                  generator: torch.Generator) -> dict[str, torch.Tensor]:
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

    def _train_stacked(self, jobs: Sequence[LocalJob], *, sgd: LocalSGD) -> list[int] | None:
        why = why_not_stacked(jobs)
        if why is not None:
            _one_by_one(why)
            return None
        return stacked_local_train(jobs, epochs=sgd.epochs, lr=sgd.lr, batch_size=sgd.batch_size, momentum=sgd.momentum)

    def _train(self, model: nn.Module, data: ImageDataset, *, client: str, sgd: LocalSGD, generator: torch.Generator,
               regulariser: Regulariser | None) -> int:
        return local_train(model, data, epochs=sgd.epochs, lr=sgd.lr, batch_size=sgd.batch_size, momentum=sgd.momentum,
                           generator=generator, regulariser=regulariser)

    def _gradient(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, client: str,
                  generator: torch.Generator) -> dict[str, torch.Tensor]:
        return batch_gradient(model, x, y)

    def describe(self) -> dict[str, Any]:
        return {"trainer": self.name}
