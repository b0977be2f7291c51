"""The FedAvg reference run: FedAvg with a protocol's budget, for byte ratios and agnostic initialisation."""
from __future__ import annotations

from pathlib import Path

from torch import nn

from privbench.data import FederatedData
from privbench.fl.protocols import FedAvg, FederatedProtocol
from privbench.fl.sgd import State
from privbench.fl.wire import Totals, Wire
from privbench.payloads import CapturePolicy, PayloadStore
from privbench.victim import Victim


def fedavg_reference(protocol: FederatedProtocol, *, model: nn.Module, data: FederatedData, root: Path,
                     seed: int) -> tuple[State, Totals]:
    """Train FedAvg with ``protocol``'s rounds, participants and local SGD from ``model``'s parameters.

    Plain SGD, no victim; its messages are counted in a side store at ``root`` (index only).
    Returns the global model and FedAvg's byte totals.
    """
    sgd = protocol.sgd
    fedavg = FedAvg(rounds=protocol.rounds, participants=protocol.participants, local_epochs=sgd.epochs, lr=sgd.lr,
                    batch_size=sgd.batch_size, momentum=sgd.momentum, vectorise=protocol.vectorise)
    side = Wire.for_protocol(fedavg, PayloadStore(root), CapturePolicy(kinds=frozenset(), rounds="all", clients="all"))
    fedavg.phase_name = "fedavg reference training"
    result = fedavg.run(model=model, data=data, victim=Victim(round=-1), wire=side, seed=seed)
    return result.final, side.totals()
