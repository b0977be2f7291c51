"""FedAvg (McMahan et al., 2017): full-model downloads, local SGD, sample-weighted averaging."""
from __future__ import annotations

import copy
from typing import Any

from torch import nn

from privbench.data import FederatedData
from privbench.fl.aggregate import aggregate
from privbench.fl.engine import Engine, InProcess
from privbench.fl.protocols.base import (ClientRound, ClientStart, FederatedProtocol, PendingUpload, ProtocolResult,
                                         RoundRecord, Upload)
from privbench.fl.sgd import accuracy, parameters_of
from privbench.fl.wire import Wire
from privbench.payloads import LocalTraining, Payload
from privbench.victim import Victim


class FedAvg(FederatedProtocol):
    """FedAvg with per-round participant sampling.

    Messages per participant and round: ``global_model`` (down) and ``update`` (up, the
    full model after local training). The victim, in its round, also sends ``gradient``:
    one step's gradient on its victim batch at the model it received.

    Example:
        >>> FedAvg(rounds=3, participants=5, local_epochs=1, lr=0.05, batch_size=32).sends
        ('global_model', 'update', 'gradient')
    """

    name = "fedavg"
    sends = ("global_model", "update", "gradient")

    def run(self, *, model: nn.Module, data: FederatedData, victim: Victim, wire: Wire, seed: int,
            engine: Engine | None = None) -> ProtocolResult:
        engine = engine or InProcess()
        self.plan_reads(data, victim)
        scratch = copy.deepcopy(model)
        theta0 = state = parameters_of(model)
        history: list[RoundRecord] = []
        per_client: dict[int, float] = {}
        for r in self.progress(range(self.rounds)):
            base, down = state, engine.downlink_wire(wire)
            starts = [self._download(base, ClientRound(c, r, seed, victim, down))
                      for c in self.sample(r, data.num_clients, seed=seed, victim=victim)]
            uploads = engine.train_round(self, model=model, data=data, state=None, starts=starts)
            state = aggregate(base, [(u.num_samples, u.tensors) for u in uploads])
            wire.store.flush()
            acc, per_client = self.known_accuracy(scratch, data, lambda c: state)
            scratch.load_state_dict(state)
            history.append(RoundRecord(r, acc, wire.totals(), global_accuracy=accuracy(scratch, data.test)))
        return ProtocolResult(theta0=theta0, final=state, accuracy=history[-1].accuracy, client_accuracy=per_client,
                              history=tuple(history), global_accuracy=history[-1].global_accuracy)

    @staticmethod
    def _download(base: dict[str, Any], at: ClientRound) -> ClientStart:
        """Send the global model to the client."""
        down = at.wire.send(Payload.from_tensors(kind="global_model", round=at.round, sender="server", receiver=at.name,
                                                 tensors=base))
        return ClientStart(at, base, down.id)

    def end_round(self, pending: PendingUpload, training: LocalTraining, state: Any) -> Upload:
        """Send the trained model (``update``); return its weight and tensors for aggregation."""
        at = pending.at
        up = at.wire.send(Payload.from_tensors(kind="update", round=at.round, sender=at.name, receiver="server",
                                               tensors=parameters_of(pending.job.model), base=pending.base_id,
                                               training=training, truth=pending.truth.tolist()))
        assert up.tensors is not None
        return Upload(len(pending.job.data), up.tensors, [])
