"""The server's checks of a client's reply against its own plan: what was asked, what the client may send, its
tensors, its training record, its sample count and its layer list, each derived by the server, never taken from
the client's word."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch

from privbench.fl.engine import ClientSide, ClientTask, TaskReply
from privbench.fl.layers import layers, state_names
from privbench.fl.reads import LOCAL_SGD, PlannedRead
from privbench.fl.trainer import LocalSGD, Trainer
from privbench.payloads import LocalTraining, Payload
from privbench.payloads.encoding import decode


class ServerPlan(Protocol):
    """What the checks read of the server's plan (``privbench.fl.protocols.base.FederatedProtocol`` has it all)."""

    @property
    def name(self) -> str: ...

    @property
    def sends(self) -> tuple[str, ...]: ...

    @property
    def sgd(self) -> LocalSGD: ...

    @property
    def trainer(self) -> Trainer: ...

    def task_reads(self, request: ClientTask, side: ClientSide) -> list[PlannedRead]: ...

    def planned_penalty(self) -> tuple[dict[str, float], float]: ...

    def upload_layers(self, upload: Payload | None, side: ClientSide) -> list[str]: ...


def planned_samples(protocol: ServerPlan, request: ClientTask, side: ClientSide) -> int:
    """The samples the server planned for ``request``'s local training (its weight in the aggregate)."""
    trained = [r.num_samples for r in protocol.task_reads(request, side) if r.what == LOCAL_SGD]
    if len(trained) != 1:
        raise ValueError(f"the server planned no local training for {request.name}'s {request.task}")
    return trained[0]


def planned_training(protocol: ServerPlan, request: ClientTask, carries: str, what: str,
                     side: ClientSide) -> LocalTraining:
    """The training record the server's plan gives a client's upload ``what`` that carries a ``gradient`` or a
    ``model``."""
    sgd, clip = protocol.sgd, protocol.trainer.clip_norm
    if carries == "gradient":
        victim = side.victim
        if request.round != victim.round or not victim.audits(request.client):
            raise ValueError(f"it sent {what}, but {request.name} sends no gradient in round {request.round}")
        return LocalTraining(lr=sgd.lr, steps=1, batch_size=victim.num_images, num_samples=victim.num_images,
                             clip=clip)
    n = planned_samples(protocol, request, side)
    penalty, proximal = protocol.planned_penalty()
    return LocalTraining(lr=sgd.lr, steps=protocol.trainer.planned_steps(n, sgd), batch_size=sgd.batch_size,
                         num_samples=n, epochs=sgd.epochs, momentum=sgd.momentum, penalty=penalty, proximal=proximal,
                         clip=clip)


def check_training(planned: LocalTraining, declared: LocalTraining | None, what: str) -> None:
    """Refuse a training record (``what``'s) that is not the planned one, naming the first field that differs."""
    if declared is None:
        raise ValueError(f"{what} carries no training record; the server planned {planned.hyperparameters()}")
    for f in dataclasses.fields(LocalTraining):
        got, want = getattr(declared, f.name), getattr(planned, f.name)
        if got != want:
            raise ValueError(f"{what} declares {f.name}={str(got)[:60]}; the server planned {str(want)[:60]}")


def planned_names(protocol: ServerPlan, payload: Payload, side: ClientSide) -> set[str] | None:
    """The tensor names ``payload`` must carry exactly (None: a subset the protocol checks otherwise)."""
    model = side.model
    if payload.kind == "update":
        return set(model.state_dict())
    if payload.kind == "gradient":
        return {n for n, p in model.named_parameters() if p.requires_grad}
    if payload.kind == "learngene":
        chosen = payload.condensation.layers if payload.condensation is not None else ()
        own = layers(model)
        if not chosen or len(set(chosen)) != len(chosen) or not set(chosen) <= set(own):
            raise ValueError(f"{payload.id} names the layers {str(list(chosen))[:80]}: not distinct layers of the model")
        return set(state_names(own, chosen))
    return None


def _described(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}"


def check_tensor(payload_id: str, name: str, t: torch.Tensor, state: Mapping[str, torch.Tensor], *,
                 of_model: bool) -> None:
    """Refuse tensor ``name`` of an upload against the server's own model ``state``, name by name: a tensor that
    is not floating point only where the model holds one of the same dtype and shape (BatchNorm's
    ``num_batches_tracked``), a floating one only with finite values and, where the upload carries a model or a
    gradient (``of_model``), only at a name of the model with its dtype and shape."""
    own = state.get(name)
    if not t.is_floating_point():
        if own is None or own.is_floating_point() or t.dtype != own.dtype or t.shape != own.shape:
            raise ValueError(f"{payload_id}: {name} is {_described(t)}, not a floating tensor"
                             + ("" if own is None else f"; the model's is {_described(own)}"))
        return
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{payload_id}: {name} holds NaN or infinite values")
    if of_model:
        if own is None:
            raise ValueError(f"{payload_id}: {name} is not a tensor of the model")
        if t.shape != own.shape or t.dtype != own.dtype:
            raise ValueError(f"{payload_id}: {name} is {_described(t)}, the model's is {_described(own)}")


def check_reply(protocol: ServerPlan, request: ClientTask, reply: TaskReply, sent: Sequence[Payload],
                side: ClientSide) -> None:
    """``FederatedProtocol.check_reply``: every payload ``sent`` and, for a ``round``, the upload the reply names."""
    state = side.model.state_dict()
    received = {**side.theta0, **{n: t for down in request.downloads if down.tensors is not None
                                  for n, t in down.tensors.items()}}  # theta0 under a partial download (in process)
    for p in [decode(p, received) for p in sent]:  # a compressed upload is checked as the server reads it
        if p.kind not in protocol.sends:
            raise ValueError(f"it sent a {p.kind}; fl={protocol.name} sends {', '.join(protocol.sends)}")
        if p.direction != "up" or p.sender != request.name or p.receiver != "server":
            raise ValueError(f"it sent {p.id}: only uploads from {request.name} to the server are accepted")
        if p.round != request.round:
            raise ValueError(f"{p.id} is for round {p.round}, not {request.round}")
        if p.tensors is None:
            raise ValueError(f"{p.id} carries no tensors")
        for name, t in p.tensors.items():
            check_tensor(p.id, name, t, state, of_model=p.spec.carries in ("model", "gradient"))
        if p.spec.client_own:
            check_training(planned_training(protocol, request, p.spec.carries, p.id, side), p.training, p.id)
            expected = planned_names(protocol, p, side)
            missing = sorted(expected - set(p.tensors)) if expected is not None else []
            if missing:
                raise ValueError(f"{p.id} lacks {missing[0]}, which the server expects of a {p.kind}")
            if expected is not None and set(p.tensors) - expected:
                raise ValueError(f"{p.id} carries {sorted(set(p.tensors) - expected)[0]}, which a {p.kind} of its "
                                 "declared layers does not")
    if request.task == "round":
        check_upload(protocol, request, reply, sent, side)


def check_upload(protocol: ServerPlan, request: ClientTask, reply: TaskReply, sent: Sequence[Payload],
                 side: ClientSide) -> None:
    """A ``round`` reply: it names one of its model uploads, the planned sample count and the upload's layers."""
    upload = reply.payload
    if upload is None or not any(upload is p for p in sent) or upload.spec.carries != "model":
        raise ValueError("its reply names no model upload")
    check_fields(protocol, request, reply.fields, upload, side)


def check_sealed(protocol: ServerPlan, request: ClientTask, fields: Mapping[str, Any], side: ClientSide) -> None:
    """A secure round's reply on Flower (its masked upload unreadable): the sample count, layers and training record
    it sends in the clear, as the server planned them."""
    try:
        record = json.loads(str(fields.get("training")))
        training = None if record is None else LocalTraining.from_dict(record)
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"its training record {str(fields.get('training'))[:60]} is not one") from None
    check_training(planned_training(protocol, request, "model", f"its round-{request.round} upload", side), training,
                   f"its round-{request.round} upload")
    check_fields(protocol, request, fields, None, side)


def check_fields(protocol: ServerPlan, request: ClientTask, fields: Mapping[str, Any], upload: Payload | None,
                 side: ClientSide) -> None:
    """A round's reply fields: ``num_samples`` the server planned, ``layers`` those of ``upload`` (as the protocol
    sends them; a sealed upload's where None)."""
    planned = planned_samples(protocol, request, side)
    claimed = fields.get("num_samples")
    if not isinstance(claimed, int) or isinstance(claimed, bool) or claimed != planned:
        raise ValueError(f"it claims num_samples={str(claimed)[:40]}; the server planned {planned} for it")
    try:
        uploaded = json.loads(str(fields.get("layers", "[]")))
    except ValueError:
        uploaded = None
    expected = protocol.upload_layers(upload, side)
    if uploaded != expected:
        raise ValueError(f"it names layers {str(uploaded)[:80]}; its upload is of the layers {str(expected)[:80]}")
