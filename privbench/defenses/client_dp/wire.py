"""The clients' wire under local DP: each model upload is clipped and noised by its client before it is sent."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from privbench.defenses.client_dp.clipping import change_from
from privbench.defenses.transform import transform
from privbench.fl.wire import Wire
from privbench.payloads import Payload


class LocalMechanism(Protocol):
    """What the wire needs of local DP: each client's release of its change, and a note of what it adds."""

    def local_release(self, change: dict[str, torch.Tensor], *, round_: int, who: str) -> dict[str, torch.Tensor]: ...

    def local_note(self) -> str: ...


class LocalDPWire(Wire):
    """Sends as the run's wire does, except that a client's model upload (``update``, ``learngene``) leaves its
    client as ``local_release`` of its change from the model it received; that is what is recorded (in process) or
    put in the Flower reply (a ClientApp's outbox)."""

    def __init__(self, wire: Wire, mechanism: LocalMechanism) -> None:
        self.inner, self.mechanism = wire, mechanism
        self.sends, self.trainer = wire.sends, wire.trainer
        if hasattr(wire, "store"):  # a ClientApp's outbox records nothing: it has no store
            self.store, self.policy = wire.store, wire.policy
        self.transform, self.truth_of, self.bytes, self._received = (wire.transform, wire.truth_of, wire.bytes,
                                                                     wire._received)

    def send(self, payload: Payload, *, truth: Sequence[int] = ()) -> Payload:
        prepared = self.inner.prepare(payload)
        base = self._received.get(prepared.sender)
        if prepared.spec.client_own and prepared.spec.carries == "model" and prepared.direction == "up":
            if base is None:
                raise ValueError(f"{prepared.id}: local DP needs the model its client received")
            noisy = self.mechanism.local_release(change_from(prepared.tensors or {}, base), round_=prepared.round,
                                                 who=prepared.sender)
            prepared = transform(prepared, base, lambda name, t: noisy.get(name, t),
                                 protection=self.mechanism.local_note())
        return self.inner.record(prepared, truth=truth)
