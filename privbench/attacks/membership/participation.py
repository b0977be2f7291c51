"""Client-level membership (participation inference): did this client take part in the round an aggregate came from?

The attacker observes the models the server sends (a client of a later round, or anyone a model is released to):
each round's aggregate (FedAvg's next global model, a cluster's next model, a secure aggregate) and the model
the round started from. It holds some records of every candidate client (the client-level game of user-level
membership inference, the question user-level DP answers). A round that trained on a client's data lowers the
loss on that client's records, so the score of (round, client) is the mean, over the client's records, of the
loss under the round's starting model minus the loss under its aggregate (the loss-change test, Watson et al.
2022, lifted to clients). Members are the clients aggregated into that model; non-members every other known
client. Clients differ in their classes, so the evaluator runs the same test on test-split records drawn in each
client's class proportions (records that carry only the class) and reports that AUC as the informed chance.
"""
from __future__ import annotations

from typing import Annotated, Any, ClassVar

import torch

from privbench.attacks.base import Attack
from privbench.attacks.membership.findings import MembershipScores
from privbench.attacks.membership.record import record_losses
from privbench.attacks.membership.views import ParticipationView
from privbench.attacks.views import ViewKind, at_weights
from privbench.payloads import kind as payload_kind
from privbench.payloads.kinds import Carries
from privbench.progress import phase
from privbench.schema import Number, ScoringBatch


class ParticipationInference(Attack[ParticipationView, MembershipScores]):
    """Score each (round, client) pair by the loss change of the client's records from the round's start to its
    aggregate.

    Args:
        records: records of each candidate client the attacker holds.
        batch_size: records scored at once.
    """

    name = "participation"
    reads: ClassVar[frozenset[Carries]] = frozenset({"model"})
    view: ClassVar[ViewKind] = "participation"

    def __init__(self, *, records: Annotated[int, Number(integer=True, low=1, high=10**6)] = 32,
                 batch_size: ScoringBatch = 256) -> None:
        if records < 1 or batch_size < 1:
            raise ValueError("attack.records and attack.batch_size must be >= 1")
        self.records, self.batch_size = records, batch_size

    def cannot_read(self, kind: str) -> str | None:
        spec = payload_kind(kind)
        if spec.aggregate and spec.carries == "model" and kind != "cluster_gene":
            return None
        return (f"attack=participation reads the models the server makes from a round's uploads (global_model, "
                f"cluster_model, aggregate); {kind} is not one")

    def budget(self) -> dict[str, Any]:
        return {"test": "loss change of the client's records, round start to aggregate",
                "records_per_client": self.records}

    def attack(self, view: Any, *, seed: int) -> MembershipScores:
        """One score per (round, client) candidate, in the view's order (deterministic: ``seed`` is not needed)."""
        del seed
        assert isinstance(view, ParticipationView)
        scores = torch.empty(len(view.candidates), dtype=torch.float64)
        with phase(f"participation: {len(view.games)} aggregates' rounds", total=len(view.games),
                   unit="round") as bar:
            for game in view.games:
                before = self._losses(at_weights(view.model, game.base).eval(), view, game.clients)
                after = self._losses(at_weights(view.model, {**game.base, **game.aggregate}).eval(), view,
                                     game.clients)
                for slot, client in zip(game.slots, game.clients):
                    scores[slot] = float((before[client] - after[client]).mean())
                bar.update(1)
        return MembershipScores(info={"test": "participation_loss_change", "level": "client",
                                      "games": len(view.games), "clients": len(view.records)},
                                scores=scores.float(), candidates=list(range(len(scores))))

    def _losses(self, model: torch.nn.Module, view: ParticipationView, clients: list[str]
                ) -> dict[str, torch.Tensor]:
        out = {}
        for client in clients:
            images, labels = view.records[client]
            out[client] = torch.cat([record_losses(model, images[i:i + self.batch_size],
                                                   labels[i:i + self.batch_size].long())
                                     for i in range(0, len(images), self.batch_size)]).double().cpu()
        return out
