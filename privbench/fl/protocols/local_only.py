"""Local-only baseline: every client trains its own model from the shared init; nothing is sent."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from privbench.fl.engine import ClientSide, ClientTask, TaskReply
from privbench.fl.protocols.base import FederatedProtocol
from privbench.fl.protocols.result import ProtocolResult, RoundRecord
from privbench.fl.protocols.round import ClientRound
from privbench.fl.reads import PlannedRead
from privbench.fl.sgd import State, known_accuracy, model_with, parameters_of
from privbench.fl.wire import Wire
from privbench.payloads import Payload
from privbench.victim import Victim


@dataclass
class OwnModels:
    """The state of one local-only run: each client's own model and its latest accuracy."""

    models: dict[int, State]
    per_client: dict[int, float] = field(default_factory=dict)


class LocalOnly(FederatedProtocol):
    """Each sampled client trains ``local_epochs`` on its own model per round (same budget, no wire).

    Its run state is each client's own model; the ``round`` task trains the sampled clients
    (in this process: nothing is sent, so no other engine has anything to carry).
    """

    name = "local"
    sends = ()

    def remote_problem(self) -> str | None:
        return "fl=local sends nothing, so there is no traffic for Flower to carry; use engine=inprocess"

    def planned_reads(self, num_samples: int, *, victim: Victim | None) -> list[PlannedRead]:
        """Every client, the victim too, trains on all its data each round; nothing else is read."""
        return super().planned_reads(num_samples, victim=None)

    def check_reply(self, request: ClientTask, reply: TaskReply, sent: Sequence[Payload], side: ClientSide) -> None:
        """Nothing is sent, so a reply carries nothing to check."""
        if reply.payload is not None or reply.fields:
            raise ValueError(f"fl={self.name} sends nothing, yet its reply carries {reply.payload or dict(reply.fields)}")

    def setup(self, engine: Any, side: ClientSide) -> OwnModels:
        return OwnModels({c: dict(side.theta0) for c in range(side.data.num_clients)})

    def configure_round(self, state: OwnModels, round_: int, side: ClientSide, down: Wire) -> list[ClientTask]:
        return [ClientTask("round", c, round_) for c in self.sample(round_, side.data.num_clients, seed=side.seed,
                                                                     victim=side.victim)]

    def serve_round(self, requests: Sequence[ClientTask], side: ClientSide) -> list[TaskReply]:
        """Each client trains its own model on its own data; nothing is uploaded."""
        own: dict[int, State] = side.state.models
        jobs = [self.local_job(model_with(side.model, own[r.client]), side.data.client(r.client),
                               at=ClientRound(r.client, r.round, side.seed, side.victim, side.wire)) for r in requests]
        self.train_clients(jobs)
        for r, job in zip(requests, jobs):
            own[r.client] = parameters_of(job.model)
        return [TaskReply() for _ in requests]

    def evaluate(self, state: OwnModels, round_: int, scratch: nn.Module, side: ClientSide) -> RoundRecord:
        acc, state.per_client = known_accuracy(scratch, side.data, lambda c: state.models[c])
        return RoundRecord(round_, acc, side.wire.totals())

    def result(self, state: OwnModels, history: tuple[RoundRecord, ...], side: ClientSide) -> ProtocolResult:
        return ProtocolResult(theta0=side.theta0, final=state.models[side.victim.client],
                              accuracy=history[-1].accuracy, client_accuracy=state.per_client, history=history,
                              personal_accuracy=history[-1].accuracy)
