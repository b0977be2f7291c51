"""What an attacker is given of one message, one typed view per shape (breaching's idea: one call, one view).

``GradientView`` (``AttackTarget``) holds an observed (pseudo-)gradient and the model it is taken at;
``ModelView`` a model a client uploaded with the weights it started from and its declared training;
``CohortView`` such a model when it is an aggregate of several clients (a ``cluster_model``); ``BasisView``
a client's data-subspace basis. A family's own views (membership, labels, active, canaries) live in its
folder. A view holds what the threat model gives the attacker and nothing else (never the evaluator's ground
truth); ``knowledge`` is its declaration, written to ``threat_model.json``."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from privbench.attacks.target import AttackTarget
from privbench.errors import AttackNotApplicableError
from privbench.payloads import LocalTraining, Payload
from privbench.payloads.training import AggregatePart

#: The view an attack asks for (``Attack.view``), by name: the contract's ``gradient``, ``model`` and ``basis`` and the
#: families' (``labels``, ``membership``, ``source``, ``participation``, ``canaries``, ``active``). Open: a new family
#: names its own and registers the game that stages it (``privbench.audit.games.register_game``).
ViewKind = str
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

