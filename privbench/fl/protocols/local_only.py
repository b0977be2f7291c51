"""Local-only baseline: every client trains its own model from the shared init; nothing is sent."""
from __future__ import annotations

import copy

from torch import nn

from privbench.data import FederatedData
from privbench.fl.engine import Engine
from privbench.fl.protocols.base import ClientRound, FederatedProtocol, ProtocolResult, RoundRecord
from privbench.fl.reads import PlannedRead
from privbench.fl.sgd import State, model_with, parameters_of
from privbench.fl.wire import Wire
from privbench.victim import Victim


class LocalOnly(FederatedProtocol):
    """Each sampled client trains ``local_epochs`` on its own model per round (same budget, no wire)."""

    name = "local"
    sends = ()

    def engine_problem(self) -> str | None:
        if self.engine == "flower":
            return "fl=local sends nothing, so there is no traffic for Flower to carry; use fl.engine=inprocess"
        return None

    def planned_reads(self, num_samples: int, *, victim: Victim | None) -> list[PlannedRead]:
        """Every client, the victim too, trains on all its data each round; nothing else is read."""
        return super().planned_reads(num_samples, victim=None)

    def run(self, *, model: nn.Module, data: FederatedData, victim: Victim, wire: Wire, seed: int,
            engine: Engine | None = None) -> ProtocolResult:
        """Every sampled client trains in this process (nothing is sent, so ``engine`` has nothing to carry)."""
        self.plan_reads(data, victim)
        scratch = copy.deepcopy(model)
        theta0 = parameters_of(model)
        own: dict[int, State] = {c: dict(theta0) for c in range(data.num_clients)}
        history: list[RoundRecord] = []
        per_client: dict[int, float] = {}
        for r in self.progress(range(self.rounds)):
            jobs = [self.local_job(model_with(model, own[c]), data.client(c), at=ClientRound(c, r, seed, victim, wire))
                    for c in self.sample(r, data.num_clients, seed=seed, victim=victim)]
            self.train_clients(jobs)
            for c, job in zip(self.sample(r, data.num_clients, seed=seed, victim=victim), jobs):
                own[c] = parameters_of(job.model)
            acc, per_client = self.known_accuracy(scratch, data, lambda c: own[c])
            history.append(RoundRecord(r, acc, wire.totals()))
        return ProtocolResult(theta0=theta0, final=own[victim.client], accuracy=history[-1].accuracy,
                              client_accuracy=per_client, history=tuple(history))
