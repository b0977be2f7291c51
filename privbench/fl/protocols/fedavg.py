"""FedAvg (McMahan et al., 2017): full-model downloads, local SGD, sample-weighted averaging."""
from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from privbench.fl.engine import ClientSide, ClientTask, TaskReply
from privbench.fl.protocols.base import FederatedProtocol
from privbench.fl.protocols.cohort import Cohort
from privbench.fl.protocols.result import ProtocolResult, RoundRecord
from privbench.fl.protocols.round import PendingUpload, Upload
from privbench.fl.sgd import State, accuracy, known_accuracy, parameters_of
from privbench.fl.wire import Wire
from privbench.payloads import LocalTraining, Payload


@dataclass
class GlobalRun:
    """The state of one FedAvg run: the global model, each client's latest accuracy and (kept by the
    clients, in process) each client's own model after its latest local training."""

    model: State
    per_client: dict[int, float] = field(default_factory=dict)
    round: int = 0
    own: dict[int, State] = field(default_factory=dict)


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
    poisson_sampling = True

    def setup(self, engine: Any, side: ClientSide) -> GlobalRun:
        return GlobalRun(side.theta0)

    def configure_round(self, state: GlobalRun, round_: int, side: ClientSide, down: Wire) -> list[ClientTask]:
        """Send the global model to each sampled client."""
        state.round = round_
        tasks = []
        for c in self.sample(round_, side.data.num_clients, seed=side.seed, victim=side.victim):
            sent = down.send(Payload.from_tensors(kind="global_model", round=round_, sender="server",
                                                  receiver=f"client{c}", tensors=state.model))
            tasks.append(ClientTask("round", c, round_, (sent,)))
        return tasks

    def aggregate(self, state: GlobalRun, requests: Sequence[ClientTask], replies: Sequence[TaskReply],
                  cohort: Cohort) -> None:
        uploads = [Upload.from_reply(r) for r in replies]
        state.model = cohort.combine(state.model, uploads, round_=state.round)  # a Poisson round may be empty

    def evaluate(self, state: GlobalRun, round_: int, scratch: nn.Module, side: ClientSide) -> RoundRecord:
        acc, state.per_client = known_accuracy(scratch, side.data, lambda c: state.model)
        scratch.load_state_dict(state.model)
        return RoundRecord(round_, acc, side.wire.totals(), global_accuracy=accuracy(scratch, side.data.test))

    def result(self, state: GlobalRun, history: tuple[RoundRecord, ...], side: ClientSide) -> ProtocolResult:
        """Also each client's own-model accuracy where the clients kept their models (in process)."""
        personal = None
        if state.own:
            personal, _ = known_accuracy(copy.deepcopy(side.model), side.data, lambda c: state.own.get(c, state.model))
        return ProtocolResult(theta0=side.theta0, final=state.model, accuracy=history[-1].accuracy,
                              client_accuracy=state.per_client, history=history,
                              global_accuracy=history[-1].global_accuracy, personal_accuracy=personal,
                              downloaded_accuracy=history[-1].accuracy)

    def end_round(self, pending: PendingUpload, training: LocalTraining, state: Any) -> Upload:
        """Send the trained model (``update``); return its weight and payload for aggregation."""
        at = pending.at
        up = at.wire.send(Payload.from_tensors(kind="update", round=at.round, sender=at.name, receiver="server",
                                               tensors=parameters_of(pending.job.model), base=pending.base_id,
                                               training=training), truth=pending.truth.tolist())
        if isinstance(state, GlobalRun):  # the client keeps its own model (where it shares the run's state)
            state.own[at.client] = parameters_of(pending.job.model)
        return Upload(len(pending.job.data), up, [])
