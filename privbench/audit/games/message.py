"""The one-message game: a view of each audited client's message as the contract's views hold it (a gradient, a
model upload, a basis); the evaluator's truth is the train images the message was computed from."""
from __future__ import annotations

from typing import Any

from torch import nn

from privbench.attacks.target import AttackTarget
from privbench.attacks.views import BasisView, ModelView
from privbench.audit.games import MessageGame, Play, register_game
from privbench.audit.plan import Plan
from privbench.data import FederatedData
from privbench.payloads import Payload
from privbench.pixels import normalise
from privbench.victim import Victim


def gradient_view(p: Plan, victim: Victim, payload: Payload, base: Payload | None, model: nn.Module,
                  data: FederatedData, *, count: int | None = None) -> AttackTarget:
    """The gradient view of ``payload`` (a pseudo-gradient for a model payload), at ``base``'s weights, for
    ``count`` images (default: the images the attack rebuilds, ``Choice.images``)."""
    count = p.choice.images(payload, victim, unroll=p.attack.unroll) if count is None else count
    return AttackTarget.from_payload(payload, base=base, model=model, num_images=count, image_shape=data.train.shape,
                                     num_classes=data.train.num_classes, mean=data.train.mean, std=data.train.std,
                                     unroll=p.attack.unroll)


def model_view(p: Plan, victim: Victim, payload: Payload, base: Payload | None, model: nn.Module,
               data: FederatedData) -> ModelView:
    """The model view of an upload (a ``CohortView`` for an aggregate)."""
    return ModelView.from_payload(payload, base=base, model=model, num_classes=data.train.num_classes,
                                  image_shape=data.train.shape, mean=data.train.mean, std=data.train.std)


def basis_view(p: Plan, victim: Victim, payload: Payload, base: Payload | None, model: nn.Module,
               data: FederatedData) -> BasisView:
    """A client's subspace basis, with the test split as labelled public images."""
    images = normalise(data.test.images.cpu().float() / 255.0, data.train.mean, data.train.std)
    return BasisView.from_payload(payload, image_shape=data.train.shape, mean=data.train.mean, std=data.train.std,
                                  public=(images, data.test.labels.cpu()))


@register_game("gradient", "model", "basis")
class OneMessage(MessageGame):
    """Each audited client's message, as the view the attack asks for."""

    photographs = True

    builders: dict[str, Any] = {"gradient": gradient_view, "model": model_view, "basis": basis_view}

    def play(self, p: Plan, victim: Victim, payload: Payload, base: Payload | None, records: list[int],
             model: nn.Module, data: FederatedData) -> Play:
        return Play(payload, self.builders[p.attack.view](p, victim, payload, base, model, data), records)
