"""The engine contract: the server loop hands each round's client work to an engine."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from torch import nn

from privbench.data import FederatedData
from privbench.fl.wire import Wire

if TYPE_CHECKING:
    from privbench.fl.protocols.base import ClientStart, FederatedProtocol, Upload
    from privbench.fl.sgd import State
    from privbench.payloads import Payload
    from privbench.fl.protocols.clustered import ClusteredProtocol

#: ``fl.engine`` values: privbench's own loop, or Flower (``privbench[flower]``).
ENGINES = ("inprocess", "flower")


class Engine(ABC):
    """Runs the clients' side of a protocol: subspaces, and each round's training and uploads.

    The protocol's server loop stays the same on every engine: it samples, sends downloads
    through ``downlink_wire``, hands the round's ``ClientStart`` list to ``train_round`` and
    aggregates the uploads it gets back; agnostic clients join through ``agnostic_subspace``
    and ``agnostic_finetune``. An engine records every message once.
    """

    name: ClassVar[str]

    def downlink_wire(self, wire: Wire) -> Wire:
        """The wire the server sends a round's downloads on (``wire`` itself in this process)."""
        return wire

    @abstractmethod
    def subspaces(self, protocol: "ClusteredProtocol", data: FederatedData, wire: Wire, *,
                  seed: int) -> list[np.ndarray]:
        """Every known client sends its subspace ``U_i`` (``subspace``); returns them in client order."""

    @abstractmethod
    def agnostic_subspace(self, protocol: "ClusteredProtocol", data: FederatedData, a: int, wire: Wire, *,
                          round_: int, seed: int) -> np.ndarray:
        """Agnostic client ``a`` sends its subspace (phase ``agnostic``); returns it as the server read it."""

    @abstractmethod
    def agnostic_finetune(self, protocol: "ClusteredProtocol", *, model: nn.Module, data: FederatedData, a: int,
                          gene: "Payload", theta0: "State", wire: Wire, seed: int) -> float:
        """Send agnostic client ``a`` its cluster learnGene (``gene``); it fine-tunes from ``[theta0 ; gene]``
        and reports its accuracy."""

    @abstractmethod
    def train_round(self, protocol: "FederatedProtocol", *, model: nn.Module, data: FederatedData, state: Any,
                    starts: Sequence["ClientStart"]) -> list["Upload"]:
        """The round's clients, each from its download: audit gradient, local training, upload."""
