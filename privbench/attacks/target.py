"""What the attacker holds: the observed gradient (by parameter name) and the model it is taken at."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from privbench.attacks.im2col import with_im2col
from privbench.errors import AttackNotApplicableError
from privbench.models import classifier_head
from privbench.payloads import LocalTraining, Payload
from privbench.pixels import bounds as pixel_bounds

#: ``label_source`` when the payload lacks the classifier head: labels cannot be read off it.
UNKNOWN_LABELS = "unknown: optimised jointly"


def observed_gradient(payload: Payload, base: Payload | None, param_names: list[str]) -> dict[str, torch.Tensor]:
    """The gradient an attack matches, restricted to parameters present in ``payload``.

    A payload that carries a gradient is used as sent. One that carries a model (``update``,
    ``learngene``, ``cluster_model``) is turned into the pseudo-gradient
    ``-(theta_after - theta_base) / (lr * steps)`` with its declared training record, which
    equals the gradient for one full-batch step and approximates its mean over several steps.
    """
    assert payload.tensors is not None
    spec = payload.spec
    names = [n for n in param_names if n in payload.tensors]
    if not spec.readable:
        raise AttackNotApplicableError(f"{payload.id}: {spec.unreadable_why}")
    if spec.carries == "gradient":
        return {n: payload.tensors[n].float() for n in names}
    if spec.carries == "model":
        if base is None or base.tensors is None:
            raise AttackNotApplicableError(f"{payload.id}: the base model it is relative to ({payload.base}) was not kept")
        training = _training(payload)
        scale = float(training.lr) * int(training.steps)
        return {n: -(payload.tensors[n].float() - base.tensors[n].float()) / scale for n in names}
    raise AttackNotApplicableError(f"payload kind {payload.kind!r} carries a {spec.carries}, no client gradient or update")


def _training(payload: Payload) -> LocalTraining:
    if payload.training is None:
        raise AttackNotApplicableError(f"{payload.id} declares no local training record (lr, steps, batch size)")
    return payload.training


@dataclass(frozen=True)
class Part:
    """One client's share of a replayed update: candidates ``start:stop``, its steps and weight."""

    start: int
    stop: int
    steps: int
    batch_size: int
    weight: float = 1.0
    names: tuple[str, ...] | None = None  # parameters it uploaded (None: all)

    def batches(self) -> list[slice]:
        """Candidate slices of each SGD step, cycling through the part's images in order."""
        n, b = self.stop - self.start, min(self.batch_size, self.stop - self.start)
        per_epoch = math.ceil(n / b)
        return [slice(self.start + (s % per_epoch) * b, min(self.start + (s % per_epoch + 1) * b, self.stop))
                for s in range(self.steps)]


@dataclass(frozen=True)
class Unroll:
    """The clients' local training as the attacker replays it (from the payloads' metadata).

    Attributes:
        lr: SGD learning rate.
        steps: the step count that scales the pseudo-gradient (as for the observed payload).
        momentum: SGD momentum.
        proximal: weight of a data-independent ``||theta - Theta||^2`` term of the declared penalty
            (GENE-FL's smooth-update term), replayed; a term that depends on private data (the
            Fisher-elastic one) is not.
        parts: one ``Part`` per client in the payload (one for an upload; the cluster's
            participants for a ``cluster_model`` aggregate, averaged per name by weight).
        elastic: ``(lambda2, eps)`` of GENE-FL's Fisher-elastic term, replayed with the Fisher of the candidates
            (None: not replayed; an attack opts in, ``with_elastic``).
        proximal_step: the penalty is taken by its proximal map after each step (``fl.penalty_step=proximal``),
            not by its gradient.
    """

    lr: float
    steps: int
    momentum: float = 0.0
    proximal: float = 0.0
    parts: tuple[Part, ...] = ()
    elastic: tuple[float, float] | None = None
    proximal_step: bool = False

    def with_elastic(self, training: dict[str, Any] | None) -> "Unroll":
        """This replay with the Fisher-elastic term a training record declares (``lambda2`` > 0), else as it is."""
        lambda2 = float((training or {}).get("lambda2", 0.0) or 0.0)
        if not lambda2:
            return self
        return replace(self, elastic=(lambda2, float((training or {}).get("eps", 0.0))))

    @classmethod
    def from_training(cls, training: LocalTraining, num_images: int) -> "Unroll":
        """The replay of ``training`` on ``num_images`` candidates (one part per aggregated client)."""
        parts, start = [], 0
        for p in training.parts:
            parts.append(Part(start, start + p.images, p.steps, p.batch_size, float(p.num_samples), p.names))
            start += p.images
        if not parts:  # one client's upload: all candidates are its data
            parts.append(Part(0, num_images, training.steps, training.batch_size))
        return cls(float(training.lr), int(training.steps), float(training.momentum), float(training.proximal),
                   parts=tuple(parts), proximal_step=bool(training.penalty.get("proximal_step", 0.0)))


@dataclass
class AttackTarget:
    """Everything the attack is given, and nothing else.

    Attributes:
        model: the architecture at the parameters the client started from (the base model).
        gradient: observed (pseudo-)gradient, keyed by parameter name (only names the payload carries).
        num_images: batch size the attacker assumes.
        image_shape: ``(C, H, W)`` of one image.
        num_classes: number of classes of the model's head.
        bounds: per-channel ``(low, high)`` of valid pixels in model input space, ``[C, 1, 1]`` each.
        unroll: when set, candidates are scored by replaying the local training, not by one gradient.
        knowledge: the threat-model declaration recorded with the results.
        evaluations: objective evaluations so far (for benchmarks).
        clip: the per-sample clip norm ``C`` the payload's training record declares (DP-SGD's, public):
            candidates' gradients are clipped per sample to it before they are averaged (None: not clipped).
        labels: the candidates' labels as recovered before optimising (per-class counts,
            ``attacks/label_counts.with_counted_labels``); None: the head gradient's sign rule, or joint optimisation.
    """

    model: nn.Module
    gradient: dict[str, torch.Tensor]
    num_images: int
    image_shape: tuple[int, int, int]
    num_classes: int
    bounds: tuple[torch.Tensor, torch.Tensor] | None = None
    unroll: Unroll | None = None
    knowledge: dict[str, Any] = field(default_factory=dict)
    evaluations: int = 0
    clip: float | None = None
    labels: torch.Tensor | None = None

    @classmethod
    def from_payload(cls, payload: Payload, *, base: Payload | None, model: nn.Module, num_images: int,
                     image_shape: tuple[int, int, int], num_classes: int, mean: tuple[float, ...] | None = None,
                     std: tuple[float, ...] | None = None, unroll: bool = False) -> "AttackTarget":
        """Build the attacker's view of ``payload`` given the server's copy of the base model.

        The attacker's model is a copy whose small convolutions compute by im2col (``with_im2col``).
        """
        device = next(model.parameters()).device
        model, _ = with_im2col(model, torch.zeros(num_images, *image_shape, device=device))
        param_names = [n for n, _ in model.named_parameters()]
        if base is not None and base.tensors is not None:
            unknown = [n for n in param_names if n not in base.tensors]
            if unknown:
                raise AttackNotApplicableError(
                    f"{payload.id}: its base {base.id} lacks {len(unknown)} parameters (e.g. {unknown[0]}); the server "
                    "does not know the model the client trained from (downlink=gene after the client's first round)")
            model.load_state_dict({**model.state_dict(), **base.tensors})
        gradient = {n: g.to(device) for n, g in observed_gradient(payload, base, param_names).items()}
        if not gradient:
            raise AttackNotApplicableError(f"{payload.id} carries none of the model's parameters")
        spec = None
        if unroll:
            if payload.spec.carries != "model":
                raise AttackNotApplicableError(f"attack.unroll=true needs a payload that carries a model, "
                                               f"not {payload.kind}: a one-step gradient has nothing to unroll")
            spec = Unroll.from_training(_training(payload), num_images)
        bounds = None
        if mean is not None and std is not None:
            low, high = pixel_bounds(mean, std)
            bounds = (low.to(device), high.to(device))
        visible = sum(gradient[n].numel() for n in gradient)
        total = sum(p.numel() for p in model.parameters())
        head = f"{classifier_head(model)}.weight"
        knowledge = {
            "payload": payload.id,
            "payload_kind": payload.kind,
            "base_model": base.id if base is not None else None,
            "batch_size": num_images,
            "labels": "not given",
            "label_head_visible": head in gradient,
            "training": payload.training.hyperparameters() if payload.training else None,
            "matching": "unrolled local training" if spec else ("gradient" if payload.spec.carries == "gradient"
                                                                 else "pseudo-gradient -(delta)/(lr*steps)"),
            "replayed_regularisers": ([f"{spec.proximal:g} * ||theta - Theta||^2"
                                       + (" (by its proximal map)" if spec.proximal_step else "")]
                                      if spec and spec.proximal else []),
            "visible_names": list(gradient),
            "visible_fraction": visible / total,
        }
        clip = payload.training.clip if payload.training else None
        knowledge["clipping"] = (f"candidates' per-sample gradients clipped to C={clip:g} (the training record's "
                                 "declared DP-SGD clip norm) before averaging" if clip else "none declared")
        return cls(model, gradient, num_images, image_shape, num_classes, bounds, spec, knowledge, clip=clip)

    @property
    def head(self) -> str:
        """Name of the classifier head module."""
        return classifier_head(self.model)

    @property
    def head_gradient(self) -> torch.Tensor | None:
        """The observed gradient of the head's weight, or None when the payload does not carry it."""
        return self.gradient.get(f"{self.head}.weight")

    @property
    def head_label_source(self) -> str:
        """``recovered counts`` when labels were set from recovered counts (``given: true counts (oracle)`` when the
        evaluator handed them over), ``recovered`` when they can be read off the head's gradient by its sign, else
        ``UNKNOWN_LABELS``."""
        if self.labels is not None:
            return "given: true counts (oracle)" if self.knowledge.get("oracle") else "recovered counts"
        return "recovered" if self.head_gradient is not None else UNKNOWN_LABELS

    @property
    def device(self) -> torch.device:
        """Where the attacker's model is (candidates are made there)."""
        return next(self.model.parameters()).device

    def randn(self, *shape: int, generator: torch.Generator) -> torch.Tensor:
        """Standard normal draws from the CPU ``generator`` (the same on every device), moved to ``device``."""
        return torch.randn(shape, generator=generator).to(self.device)

    def params(self) -> dict[str, torch.Tensor]:
        """The model's parameters whose gradients are observed, by name."""
        named = dict(self.model.named_parameters())
        return {n: named[n] for n in self.gradient}

    def clamp_(self, images: torch.Tensor) -> None:
        """Box ``images`` in place to the valid pixel range (no-op without bounds)."""
        if self.bounds is not None:
            with torch.no_grad():
                images.copy_(torch.maximum(torch.minimum(images, self.bounds[1]), self.bounds[0]))
