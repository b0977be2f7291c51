"""FedAvg (McMahan et al., 2017): full-model downloads, local SGD, sample-weighted averaging."""
from __future__ import annotations

import copy

from torch import nn

from privbench.data import FederatedData
from privbench.fl.aggregate import aggregate
from privbench.fl.protocols.base import ClientRound, FederatedProtocol, PendingUpload, ProtocolResult, RoundRecord
from privbench.fl.sgd import State, accuracy, model_with, parameters_of
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

    def run(self, *, model: nn.Module, data: FederatedData, victim: Victim, wire: Wire, seed: int) -> ProtocolResult:
        self.plan_reads(data, victim)
        scratch = copy.deepcopy(model)
        theta0 = state = parameters_of(model)
        history: list[RoundRecord] = []
        per_client: dict[int, float] = {}
        for r in self.progress(range(self.rounds)):
            base = state
            pending = [self._download(model, base, data, ClientRound(c, r, seed, victim, wire))
                       for c in self.sample(r, data.num_clients, seed=seed, victim=victim)]
            trainings = self.train_clients([p.job for p in pending])
            state = aggregate(base, [self._upload(p, t) for p, t in zip(pending, trainings)])
            wire.store.flush()
            acc, per_client = self.known_accuracy(scratch, data, lambda c: state)
            scratch.load_state_dict(state)
            history.append(RoundRecord(r, acc, wire.totals(), global_accuracy=accuracy(scratch, data.test)))
        return ProtocolResult(theta0=theta0, final=state, accuracy=history[-1].accuracy, client_accuracy=per_client,
                              history=tuple(history), global_accuracy=history[-1].global_accuracy)

    def _download(self, model: nn.Module, base: State, data: FederatedData, at: ClientRound) -> PendingUpload:
        """Send the global model; the victim sends its audit gradient; return the client's training job."""
        down = at.wire.send(Payload.from_tensors(kind="global_model", round=at.round, sender="server", receiver=at.name,
                                                 tensors=base))
        local = model_with(model, base)
        client_data, truth = data.client(at.client), data.clients[at.client]
        step = None
        if at.is_victim:
            step = self.victim_gradient(local, client_data, truth, at=at, base_id=down.id)
            client_data, truth = step.data, step.truth
        return PendingUpload(at, self.local_job(local, client_data, at=at), truth, down.id, base, step)

    @staticmethod
    def _upload(pending: PendingUpload, training: LocalTraining) -> tuple[int, State]:
        """Send the trained model (``update``); return its weight and tensors for aggregation."""
        at = pending.at
        up = at.wire.send(Payload.from_tensors(kind="update", round=at.round, sender=at.name, receiver="server",
                                               tensors=parameters_of(pending.job.model), base=pending.base_id,
                                               training=training, truth=pending.truth.tolist()))
        assert up.tensors is not None
        return len(pending.job.data), up.tensors
