"""What the attacker holds: the observed gradient (by parameter name) and the model it is taken at."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from privbench.errors import AttackNotApplicableError
from privbench.models import classifier_head
from privbench.payloads import Payload

GRADIENT_KINDS = ("gradient", "gene_gradient")
MODEL_KINDS = ("update", "learngene")


def observed_gradient(payload: Payload, base: Payload | None, param_names: list[str]) -> dict[str, torch.Tensor]:
    """The gradient an attack matches, restricted to parameters present in ``payload``.

    A ``gradient`` payload is used as sent. A model upload (``update``) is turned into the
    pseudo-gradient ``-(theta_after - theta_base) / (lr * local_steps)``, which equals the
    gradient for one full-batch step and approximates its mean over several steps.
    """
    assert payload.tensors is not None
    names = [n for n in param_names if n in payload.tensors]
    if payload.kind in GRADIENT_KINDS:
        return {n: payload.tensors[n].float() for n in names}
    if payload.kind in MODEL_KINDS:
        if base is None or base.tensors is None:
            raise AttackNotApplicableError(f"{payload.id}: the base model it is relative to ({payload.base}) was not kept")
        scale = float(payload.hparams["lr"]) * int(payload.hparams["local_steps"])
        return {n: -(payload.tensors[n].float() - base.tensors[n].float()) / scale for n in names}
    raise AttackNotApplicableError(f"payload kind {payload.kind!r} carries no client gradient or update")


@dataclass
class AttackTarget:
    """Everything the attack is given, and nothing else.

    Attributes:
        model: the architecture at the parameters the client started from (the base model).
        gradient: observed gradient, keyed by parameter name (only names the payload carries).
        num_images: batch size the attacker assumes.
        image_shape: ``(C, H, W)`` of one image.
        num_classes: number of classes of the model's head.
        knowledge: the threat-model declaration recorded with the results.
    """

    model: nn.Module
    gradient: dict[str, torch.Tensor]
    num_images: int
    image_shape: tuple[int, int, int]
    num_classes: int
    knowledge: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_payload(cls, payload: Payload, *, base: Payload | None, model: nn.Module, num_images: int,
                     image_shape: tuple[int, int, int], num_classes: int) -> "AttackTarget":
        """Build the attacker's view of ``payload`` given the server's copy of the base model."""
        model = copy.deepcopy(model)
        param_names = [n for n, _ in model.named_parameters()]
        if base is not None and base.tensors is not None:
            unknown = [n for n in param_names if n not in base.tensors]
            if unknown:
                raise AttackNotApplicableError(
                    f"{payload.id}: its base {base.id} lacks {len(unknown)} parameters (e.g. {unknown[0]}); the server "
                    "does not know the model the client trained from (downlink=gene after the client's first round)")
            model.load_state_dict({**model.state_dict(), **base.tensors})
        gradient = observed_gradient(payload, base, param_names)
        if not gradient:
            raise AttackNotApplicableError(f"{payload.id} carries none of the model's parameters")
        visible = sum(gradient[n].numel() for n in gradient)
        total = sum(p.numel() for p in model.parameters())
        knowledge = {
            "payload": payload.id,
            "payload_kind": payload.kind,
            "base_model": base.id if base is not None else None,
            "batch_size": num_images,
            "labels": "not given",
            "hparams": {k: v for k, v in payload.hparams.items() if k in ("lr", "local_steps", "epochs", "batch_size")},
            "visible_names": list(gradient),
            "visible_fraction": visible / total,
        }
        return cls(model, gradient, num_images, image_shape, num_classes, knowledge)

    @property
    def head(self) -> str:
        """Name of the classifier head module."""
        return classifier_head(self.model)

    def params(self) -> dict[str, torch.Tensor]:
        """The model's parameters whose gradients are observed, by name."""
        named = dict(self.model.named_parameters())
        return {n: named[n] for n in self.gradient}
