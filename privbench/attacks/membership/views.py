"""What a membership, source or participation attack holds: a message (or aggregates) and candidates."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from privbench.attacks.views import at_weights
from privbench.errors import AttackNotApplicableError
from privbench.payloads import LocalTraining, Payload


@dataclass
class MembershipView:
    """A client's message and a pool of candidate records, half of them in the training the message came from.

    The membership game (Yeom et al., 2018; Carlini et al., 2022): the attacker holds the message and
    candidate records with their labels, and scores each; members are the records the message was
    computed from, non-members records no client holds, of the same classes (so a test that only
    recognises the class scores chance). Which candidates are members is the evaluator's.

    Attributes:
        model: the architecture at the weights the client started from (``base``).
        base: those weights (None when the server did not keep them).
        weights: a model payload's uploaded tensors by name (empty for a gradient).
        gradient: a gradient payload's tensors by name (empty for a model payload).
        candidates: the candidate records in model input space (normalised), ``[M, C, H, W]``.
        labels: their labels.
        knowledge: the threat-model declaration.
        training: the message's declared local training (None when not recorded).
        population: records of the task the attacker holds besides the candidates (test-split records of the
            candidates' classes no client holds and no candidate is), for shadow training, ``[P, C, H, W]``.
        population_labels: their labels.
    """

    model: nn.Module
    base: dict[str, torch.Tensor] | None
    weights: dict[str, torch.Tensor]
    gradient: dict[str, torch.Tensor]
    candidates: torch.Tensor
    labels: torch.Tensor
    knowledge: dict[str, Any] = field(default_factory=dict)
    training: LocalTraining | None = None
    population: torch.Tensor | None = None
    population_labels: torch.Tensor | None = None

    @classmethod
    def from_payload(cls, payload: Payload, *, base: Payload | None, model: nn.Module, candidates: torch.Tensor,
                     labels: torch.Tensor, pool: str, population: tuple[torch.Tensor, torch.Tensor] | None = None
                     ) -> "MembershipView":
        """The attacker's view of a model or gradient payload with ``candidates`` (normalised) and their labels,
        and ``population`` (normalised images and labels) where the attack trains shadows."""
        if payload.tensors is None:
            raise AttackNotApplicableError(f"{payload.id}: its tensors were not kept")
        base_state = dict(base.tensors) if base is not None and base.tensors is not None else None
        local = at_weights(model, base_state)
        carries_gradient = payload.spec.carries == "gradient"
        knowledge = {"payload": payload.id, "payload_kind": payload.kind,
                     "base_model": base.id if base is not None else None, "visible_names": list(payload.tensors),
                     "candidates": int(len(candidates)), "candidate_pool": pool, "candidate_labels": "given",
                     "members": "not given (the evaluator's)",
                     "training": payload.training.hyperparameters() if payload.training else None}
        if population is not None:
            knowledge["population"] = (f"{len(population[0])} test-split records of the candidates' classes, "
                                       "none of them a candidate")
        return cls(local, base_state, {} if carries_gradient else dict(payload.tensors),
                   dict(payload.tensors) if carries_gradient else {}, candidates, labels, knowledge, payload.training,
                   *(population if population is not None else (None, None)))


@dataclass
class SourceView:
    """Every client's upload of one round and records known to be in one of them (source inference: whose?).

    Attributes:
        model: the architecture (its weights are replaced by each client's).
        weights: each client's model as the server reconstructs it from its upload (its download with the uploaded
            tensors in place), in ``clients``' order.
        clients: the uploading clients' names.
        candidates: the records, in model input space ``[M, C, H, W]``.
        labels: their labels (the attacker holds the records, so it knows them).
        knowledge: the threat-model declaration.
        client_classes: each client's class set where the attacker is given it (None: not given).
    """

    model: nn.Module
    weights: list[dict[str, torch.Tensor]]
    clients: list[str]
    candidates: torch.Tensor
    labels: torch.Tensor
    knowledge: dict[str, Any] = field(default_factory=dict)
    client_classes: list[set[int]] | None = None


@dataclass
class ParticipationRound:
    """One aggregate of the participation game: the model its round started from, the aggregate, and the candidate
    clients scored against it (``slots``: their places among the view's candidates).

    Attributes:
        round: the round whose uploads were aggregated.
        cluster: the cohort (cluster) it aggregates, or None (one global model).
        base: the model the round's participants received (every floating tensor by name).
        aggregate: the aggregate's tensors by name (a partial one replaces only those).
        clients: the candidate clients' names.
        slots: each candidate's index in ``ParticipationView.candidates``.
    """

    round: int
    cluster: int | None
    base: dict[str, torch.Tensor]
    aggregate: dict[str, torch.Tensor]
    clients: list[str]
    slots: list[int]


@dataclass
class ParticipationView:
    """Consecutive models the server sent and records of every candidate client (did this client take part?).

    Attributes:
        model: the architecture (its weights are replaced by each game's).
        games: one per observed aggregate.
        records: each candidate client's records the attacker holds, ``(images [M, C, H, W] normalised, labels)``.
        candidates: ``(round, cluster, client)`` of each scored pair, in score order.
        knowledge: the threat-model declaration.
    """

    model: nn.Module
    games: list[ParticipationRound]
    records: dict[str, tuple[torch.Tensor, torch.Tensor]]
    candidates: list[tuple[int, int | None, str]]
    knowledge: dict[str, Any] = field(default_factory=dict)
