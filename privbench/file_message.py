"""A message read from a user's file, as the attacker holds it: the message and the model it is relative to, the
true images it was computed from (the evaluator's), and the client's training as the user declares it."""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from privbench.errors import ConfigError
from privbench.payloads import Payload, PayloadStore
from privbench.payloads.encoding import decode
from privbench.payloads.kinds import KINDS
from privbench.payloads.training import LocalTraining
from privbench.tensor_files import named_tensors


@dataclass(frozen=True)
class Recorded:
    """A message to attack and the model it is relative to (for kinds that carry a model)."""

    payload: Payload
    base: Payload | None


def recorded(source: Path, *, payload_id: str | None, kind: str, base: Path | None,
             training: LocalTraining | None, batch_size: int, trusted: bool = False,
             limit: int | None = None) -> Recorded:
    """The message in ``source`` (a store folder plus ``payload_id``, or a tensor file) and its base, files read
    only up to ``limit`` bytes each (``tensor_files.named_tensors``)."""
    if source.is_dir():
        if payload_id is None:
            raise ConfigError(f"{source} is a payload store: give --id (one of the ids in its index.json)")
        store = PayloadStore.open(source, trusted=trusted)
        payload = store.load(payload_id)
        base_payload = store.load(payload.base) if payload.base and base is None else None
    else:
        if kind not in KINDS:
            raise ConfigError(f"--kind {kind}: allowed: {', '.join(KINDS)}")
        tensors = named_tensors(source, limit=limit)
        payload = Payload.from_tensors(kind=kind, round=0, sender="client", receiver="server", tensors=tensors,
                                       training=training or LocalTraining(lr=1.0, steps=1, batch_size=batch_size,
                                                                          num_samples=batch_size))
        base_payload = None
    if base is not None:
        base_payload = Payload.from_tensors(kind="global_model", round=payload.round, sender="server",
                                            receiver=payload.sender, tensors=named_tensors(base, limit=limit))
    if training is not None and payload.training is None:
        payload.training = training
    if payload.spec.carries == "model" and base_payload is None:
        raise ConfigError(f"a {payload.kind} payload carries a model: give --base, the weights the client started from")
    try:
        payload = decode(payload, base_payload.tensors if base_payload is not None else None)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return Recorded(payload, base_payload)


def read_truth(path: Path, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``images`` (``[N, C, H, W]`` in [0, 1]) and optional ``labels`` from a tensor file of at most ``limit`` bytes."""
    tensors = named_tensors(path, integer=("labels",), limit=limit)
    if "images" not in tensors:
        raise ConfigError(f"{path}: needs a tensor named 'images' ([N, C, H, W] in [0, 1]) and optionally 'labels'")
    images = tensors["images"].float()
    if images.ndim != 4 or images.min() < 0 or images.max() > 1:
        raise ConfigError(f"{path}: 'images' must be [N, C, H, W] in [0, 1]; got {tuple(images.shape)}")
    return images, tensors.get("labels")


def declared_training(args: argparse.Namespace) -> LocalTraining | None:
    """What the client declared about its training, checked: learning rate, steps (or epochs and local batch size,
    from which the steps follow), momentum and DP-SGD's clip norm; None when nothing is declared."""
    schedule = (args.lr, args.steps, args.epochs, args.local_batch_size, args.momentum)
    if all(v is None for v in (*schedule, args.clip)):
        return None
    if args.clip is not None and (not math.isfinite(args.clip) or args.clip <= 0):
        raise ConfigError(f"--clip {args.clip}: the clip norm must be a positive number")
    n = args.batch_size
    if all(v is None for v in schedule):  # a clipped gradient: one step on the batch
        return LocalTraining(lr=1.0, steps=1, batch_size=n, num_samples=n, clip=args.clip)
    if args.lr is None or not math.isfinite(args.lr) or args.lr <= 0:
        raise ConfigError("--lr and --steps go together: a positive learning rate and at least one step "
                          "(--steps, or --epochs and --local-batch-size)")
    for flag, value in (("--steps", args.steps), ("--epochs", args.epochs), ("--local-batch-size", args.local_batch_size)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} {value}: must be at least 1")
    momentum = 0.0 if args.momentum is None else args.momentum
    if not (math.isfinite(momentum) and 0 <= momentum < 1):
        raise ConfigError(f"--momentum {args.momentum}: must be in [0, 1)")
    batch, epochs = min(args.local_batch_size or n, n), args.epochs or 1
    steps = epochs * math.ceil(n / batch)
    if args.steps is not None:
        if (args.epochs is not None or args.local_batch_size is not None) and args.steps != steps:
            raise ConfigError(f"--steps {args.steps} disagrees with --epochs {epochs} x ceil({n} / {batch}) = {steps}")
        steps = args.steps
    elif args.epochs is None and args.local_batch_size is None:
        raise ConfigError("--lr and --steps go together: a positive learning rate and at least one step "
                          "(--steps, or --epochs and --local-batch-size)")
    return LocalTraining(lr=args.lr, steps=steps, batch_size=batch, num_samples=n, epochs=epochs, momentum=momentum,
                         clip=args.clip)
