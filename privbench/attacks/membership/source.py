"""Source inference (Hu et al., "Source Inference Attacks in Federated Learning", ICDM 2021): given a record known
to be in some client's training this round, which client holds it? The honest-but-curious server holds every
client's upload of the round; a model fits the records it was trained on best, so the guess is the client whose
model has the smallest loss on the record (the paper's Bayes-optimal rule under its posterior model). Chance is one
over the number of clients; a prior that knows each client's classes (the class-set attack gives them) picks among
the clients that hold the record's class, and the evaluator reports that informed chance beside it. With
``prior=classes`` the attacker is given each client's class set (the true ones: an upper bound on what the class-set
and label-count attacks give) and picks only among the clients holding the record's class, so its accuracy above the
informed chance is what the uploads say about the record itself.
"""
from __future__ import annotations

from typing import Any, ClassVar

import torch

from privbench.attacks.base import Attack
from privbench.attacks.membership.findings import SourceGuesses
from privbench.attacks.membership.record import record_losses
from privbench.attacks.membership.views import SourceView
from privbench.attacks.views import ViewKind, at_weights
from privbench.payloads.kinds import Carries
from privbench.progress import phase
from privbench.schema import Candidates, ScoringBatch

#: What the attacker is given besides the uploads: nothing, or each client's class set.
PRIORS = ("none", "classes")


class SourceInference(Attack[SourceView, SourceGuesses]):
    """Attribute each candidate record to the client whose uploaded model has the smallest loss on it.

    Args:
        max_candidates: most records attributed (drawn evenly from the round's clients).
        batch_size: records scored at once.
        prior: ``none`` (the paper's rule) or ``classes`` (only clients holding the record's class are candidates).
    """

    name = "source"
    reads: ClassVar[frozenset[Carries]] = frozenset({"model"})
    view: ClassVar[ViewKind] = "source"

    def __init__(self, *, max_candidates: Candidates = 500, batch_size: ScoringBatch = 256,
                 prior: str = "none") -> None:
        if max_candidates < 2 or batch_size < 1:
            raise ValueError("attack.max_candidates must be >= 2 and attack.batch_size >= 1")
        if prior not in PRIORS:
            raise ValueError(f"attack.prior={prior!r} is not one of {', '.join(PRIORS)}")
        self.max_candidates, self.batch_size, self.prior = max_candidates, batch_size, prior

    def cannot_read(self, kind: str) -> str | None:
        reason = super().cannot_read(kind)
        if reason is None and kind not in ("update", "learngene"):
            return f"attack=source compares the clients' own uploads (update, learngene); {kind} is not one"
        return reason

    def attack(self, view: Any, *, seed: int) -> SourceGuesses:
        """Each record's loss under each client's model (deterministic: ``seed`` is not needed)."""
        del seed
        assert isinstance(view, SourceView)
        columns = []
        with phase(f"source: {len(view.candidates)} records under each client's upload", total=len(view.weights),
                   unit="client") as bar:
            for weights in view.weights:
                model = at_weights(view.model, weights).eval()
                columns.append(torch.cat([record_losses(model, view.candidates[i:i + self.batch_size],
                                                        view.labels[i:i + self.batch_size].long())
                                          for i in range(0, len(view.candidates), self.batch_size)]).cpu())
                bar.update(1)
        losses = torch.stack(columns, 1)
        if view.client_classes is not None:  # a client without the record's class cannot hold it
            holds = torch.tensor([[int(y) in held for held in view.client_classes] for y in view.labels.tolist()])
            losses = losses.masked_fill(~holds, float("inf"))
        return SourceGuesses(losses=losses, clients=list(view.clients),
                             info={"rule": "smallest loss" + (" among the clients holding the record's class"
                                                              if view.client_classes is not None else ""),
                                   "records": len(view.candidates), "clients": len(view.clients)})
