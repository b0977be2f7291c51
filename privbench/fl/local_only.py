"""Local-only baseline: every client trains its own model from the shared init; nothing is sent."""
from __future__ import annotations

import copy

from privbench.data import FederatedData
from privbench.fl.local import parameters_of
from privbench.fl.protocol import FederatedProtocol, FLResult
from privbench.fl.victim import Victim
from privbench.fl.wire import Wire


class LocalOnly(FederatedProtocol):
    """Each sampled client trains ``local_epochs`` on its own model per round (same budget, no wire)."""

    name = "local"
    emits: tuple[str, ...] = ()

    def run(self, *, model, data: FederatedData, victim: Victim, wire: Wire, seed: int) -> FLResult:
        theta0 = parameters_of(model)
        own = {c: dict(theta0) for c in range(data.num_clients)}
        history = []
        for r in self.progress(range(self.rounds), desc="rounds"):
            for c in self.sample(r, data.num_clients, seed=seed, victim=victim):
                local = copy.deepcopy(model)
                local.load_state_dict(own[c])
                self.local_update(local, data.client(c), client=c, round_=r, seed=seed)
                own[c] = parameters_of(local)
            history.append({"round": r, "accuracy": self.known_accuracy(model, data, lambda c: own[c]), **wire.totals()})
        model.load_state_dict(own[victim.client])
        return FLResult(model=model, accuracy=history[-1]["accuracy"], history=history)
