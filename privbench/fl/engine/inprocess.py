"""privbench's own engine: every client runs in this process, a round's clients trained together."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from torch import nn

from privbench.data import FederatedData
from privbench.fl.engine.base import Engine
from privbench.fl.wire import Wire

if TYPE_CHECKING:
    from privbench.fl.protocols.base import ClientStart, FederatedProtocol, Upload
    from privbench.fl.sgd import State
    from privbench.payloads import Payload
    from privbench.fl.protocols.clustered import ClusteredProtocol


class InProcess(Engine):
    """Clients run here: messages go straight onto the run's wire; ``fl.vectorise`` can stack a round."""

    name = "inprocess"

    def subspaces(self, protocol: "ClusteredProtocol", data: FederatedData, wire: Wire, *,
                  seed: int) -> list[np.ndarray]:
        return [protocol.send_subspace(data, c, wire, seed=seed) for c in range(data.num_clients)]

    def agnostic_subspace(self, protocol: "ClusteredProtocol", data: FederatedData, a: int, wire: Wire, *,
                          round_: int, seed: int) -> np.ndarray:
        return protocol.send_subspace(data, a, wire, seed=seed, agnostic=True, round_=round_)

    def agnostic_finetune(self, protocol: "ClusteredProtocol", *, model: nn.Module, data: FederatedData, a: int,
                          gene: "Payload", theta0: "State", wire: Wire, seed: int) -> float:
        from privbench.fl.genefl.agnostic import finetuned_accuracy

        sent = wire.send(gene)
        assert sent.tensors is not None
        return finetuned_accuracy(model, {**theta0, **sent.tensors}, data, a, protocol.agnostic, seed=seed)

    def train_round(self, protocol: "FederatedProtocol", *, model: nn.Module, data: FederatedData, state: Any,
                    starts: Sequence["ClientStart"]) -> list["Upload"]:
        pending = [protocol.begin_round(model, s, data, state) for s in starts]
        trainings = protocol.train_clients([p.job for p in pending])
        return [protocol.end_round(p, t, state) for p, t in zip(pending, trainings)]
