"""What an attacker is given, one typed view per shape of message (breaching's idea: one call, one view).

``GradientView`` (``AttackTarget``) holds an observed (pseudo-)gradient and the model it is taken at;
``ModelView`` a model a client uploaded with the weights it started from and its declared training;
``CohortView`` such a model when it is an aggregate of several clients (a ``cluster_model``); ``BasisView``
a client's data-subspace basis; ``MembershipView`` a message and candidate records; ``LabelView`` a
gradient view with labelled public data. A view holds what the threat model gives the attacker and nothing else
(never the evaluator's ground truth); ``knowledge`` is its declaration, written to ``threat_model.json``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from privbench.attacks.target import AttackTarget
from privbench.errors import AttackNotApplicableError
from privbench.payloads import LocalTraining, Payload
from privbench.payloads.training import AggregatePart
from privbench.pixels import normalise

#: The views an attack may ask for (``Attack.view``).
ViewKind = Literal["gradient", "model", "basis", "membership", "labels", "active", "canaries", "source",
                   "participation"]
#: The gradient view is today's attack target.
GradientView = AttackTarget


def at_weights(model: nn.Module, weights: dict[str, torch.Tensor] | None) -> nn.Module:
    """A copy of ``model`` with ``weights`` (some or all of its state, by name) in place; ``model`` is not changed."""
    local = copy.deepcopy(model)
    if weights:
        local.load_state_dict({**local.state_dict(), **weights})
    return local


@dataclass
class ModelView:
    """A model a client sent (``update``, ``learngene``) and what the server knows of how it was trained.

    Attributes:
        model: the architecture at the weights the client started from (``base``), on the attack's device.
        weights: the uploaded tensors by name (a learnGene carries only its layers).
        base: the weights the client started from (None when the server did not keep them).
        training: the client's declared local training (epochs, batch size, lr, samples), or None.
        num_classes: classes of the model's head.
        image_shape: ``(C, H, W)`` of one input.
        mean: per-channel input mean the model was trained with.
        std: per-channel input std.
        knowledge: the threat-model declaration.
    """

    model: nn.Module
    weights: dict[str, torch.Tensor]
    base: dict[str, torch.Tensor] | None
    training: LocalTraining | None
    num_classes: int
    image_shape: tuple[int, int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    knowledge: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_payload(cls, payload: Payload, *, base: Payload | None, model: nn.Module, num_classes: int,
                     image_shape: tuple[int, int, int], mean: tuple[float, ...],
                     std: tuple[float, ...]) -> "ModelView":
        """The attacker's view of a model payload (a ``CohortView`` for an aggregate), ``model`` at its base."""
        if payload.tensors is None:
            raise AttackNotApplicableError(f"{payload.id}: its tensors were not kept")
        base_state = base.tensors if base is not None else None
        local = at_weights(model, base_state)
        view = CohortView if payload.spec.aggregate else ModelView
        knowledge = {"payload": payload.id, "payload_kind": payload.kind,
                     "base_model": base.id if base is not None else None, "labels": "not given",
                     "training": payload.training.hyperparameters() if payload.training else None,
                     "visible_names": list(payload.tensors)}
        return view(local, dict(payload.tensors), dict(base_state) if base_state is not None else None,
                    payload.training, num_classes, image_shape, tuple(mean), tuple(std), knowledge)

    @property
    def delta(self) -> dict[str, torch.Tensor]:
        """``weights - base`` for every uploaded tensor the base holds."""
        if self.base is None:
            return {}
        return {n: w - self.base[n] for n, w in self.weights.items() if n in self.base}


@dataclass
class CohortView(ModelView):
    """An aggregate of several clients' uploads (a ``cluster_model``): the server sees only the average."""

    @property
    def members(self) -> tuple[AggregatePart, ...]:
        """Each aggregated client's declared share (its images, steps, batch size, the names it sent)."""
        return self.training.parts if self.training is not None else ()


@dataclass
class BasisView:
    """A client's data-subspace basis ``U`` (``[D, d]`` in model input space), as sent for clustering.

    Attributes:
        basis: the basis.
        image_shape: ``(C, H, W)`` of one image (``D = C * H * W``).
        mean: per-channel input mean of the model space.
        std: per-channel input std.
        knowledge: the threat-model declaration.
        public: labelled public images of the task (the test split, which no client holds), model input space.
        public_labels: their labels.
    """

    basis: torch.Tensor
    image_shape: tuple[int, int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    knowledge: dict[str, Any] = field(default_factory=dict)
    public: torch.Tensor | None = None
    public_labels: torch.Tensor | None = None

    @classmethod
    def from_payload(cls, payload: Payload, *, image_shape: tuple[int, int, int], mean: tuple[float, ...],
                     std: tuple[float, ...], public: tuple[torch.Tensor, torch.Tensor] | None = None) -> "BasisView":
        """The attacker's view of a ``subspace`` payload (with ``public`` images and labels, normalised)."""
        if payload.tensors is None or "U" not in payload.tensors:
            raise AttackNotApplicableError(f"{payload.id}: carries no basis U")
        basis = payload.tensors["U"]
        knowledge = {"payload": payload.id, "payload_kind": payload.kind, "visible_names": ["U"],
                     "basis_shape": list(basis.shape), "labels": "not given"}
        if public is not None:
            knowledge["public_data"] = f"{len(public[0])} labelled test-split images"
        return cls(basis, image_shape, tuple(mean), tuple(std), knowledge,
                   *(public if public is not None else (None, None)))


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
class LabelView:
    """A message's (pseudo-)gradient at the model it was computed at, and labelled public data of the task.

    Attributes:
        target: the gradient view (the observed head gradient, the base model, the image count).
        public: public images (the test split, which no client holds) in model input space, ``[M, C, H, W]``.
        public_labels: their labels ``[M]``.
    """

    target: AttackTarget
    public: torch.Tensor
    public_labels: torch.Tensor

    @classmethod
    def from_test_split(cls, target: AttackTarget, images: torch.Tensor, labels: torch.Tensor, *, count: int,
                        seed: int, mean: tuple[float, ...], std: tuple[float, ...]) -> "LabelView":
        """``target`` with ``count`` of the test split's uint8 ``images`` (no client holds them) drawn by ``seed``,
        normalised by the run's ``mean`` and ``std``, and their ``labels``."""
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed * 7919 + 29))
        rows = order[:count].to(images.device)
        public = normalise(images[rows].cpu().float() / 255.0, mean, std)
        return cls(target, public.to(target.device), labels[rows].cpu().to(target.device))

    @property
    def knowledge(self) -> dict[str, Any]:
        """The gradient view's declaration, and the public data it was given."""
        return {**self.target.knowledge, "public_data": f"{len(self.public)} labelled test-split images"}


@dataclass
class ActiveView:
    """An active server's round: the download it crafted and the victim's reply, trained as usual on it.

    Attributes:
        sent: the crafted download's state (what the victim received).
        observed: the reply as the server reads it: a gradient's tensors, or a model's change from ``sent``.
        reply_kind: the reply's payload kind (``gradient``, ``update``).
        training: the victim's declared training of the reply.
        image_shape: ``(C, H, W)`` of one input.
        mean: per-channel input mean of the model's input space.
        std: per-channel input std.
        crafted_layer: the layer the attack crafted (``privbench.fl.layers`` names), which its read needs.
        knowledge: the threat-model declaration (what the server changed, what it was sent back).
        client_check: what the victim's own check of the download found (``defenses.detector``; the
            evaluator's figure, which the attack does not read).
        target: the evaluator's truth of a server that isolated one member of a secure aggregate: that member's
            train images (None: the message's own images are the truth); the evaluator's field, which no attack
            reads.
    """

    sent: dict[str, torch.Tensor]
    observed: dict[str, torch.Tensor]
    reply_kind: str
    training: LocalTraining | None
    image_shape: tuple[int, int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    crafted_layer: str
    knowledge: dict[str, Any] = field(default_factory=dict)
    client_check: dict[str, Any] = field(default_factory=dict)
    target: list[int] | None = None


@dataclass
class CanaryView:
    """A one-run DP audit's round: the victim's model change as the server sees it, and the ``m`` canaries the
    auditor designed, of which the victim's training included each with probability 1/2: Dirac gradient canaries
    (one coordinate each) or input-space canaries (mislabelled images, with the model the victim started from).

    Attributes:
        change: the uploaded model's change from its download, by name.
        coordinates: every Dirac canary's (parameter name, flat index); which were included is the evaluator's.
        knowledge: the threat-model declaration (the canaries, the round's DP parameters, the claimed epsilon).
        model: input-space canaries: the model at the download the victim started from.
        images: input-space canaries: the canary images, normalised as the model's input.
        labels: input-space canaries: their (wrong) labels.
    """

    change: dict[str, torch.Tensor]
    coordinates: list[tuple[str, int]]
    knowledge: dict[str, Any] = field(default_factory=dict)
    model: nn.Module | None = None
    images: torch.Tensor | None = None
    labels: torch.Tensor | None = None


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


View = (AttackTarget | ModelView | BasisView | MembershipView | LabelView | ActiveView | CanaryView | SourceView
        | ParticipationView)
