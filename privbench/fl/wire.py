"""The wire: every message crosses it, is checked, defended (uplink), counted, and kept or not."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from privbench.fl.trainer import Trainer
from privbench.payloads import CapturePolicy, Payload, PayloadStore
from privbench.payloads.capture import AnyOf
from privbench.payloads.transform import MessageTransform

if TYPE_CHECKING:
    from privbench.fl.protocols.base import FederatedProtocol


class WireError(RuntimeError):
    """A protocol sent what it did not declare, or an upload its trainer did not produce."""


@dataclass(frozen=True)
class Totals:
    """Protocol bytes so far (audit-only messages excluded)."""

    uplink_bytes: int
    downlink_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.uplink_bytes + self.downlink_bytes

    def as_dict(self) -> dict[str, int]:
        return {"uplink_bytes": self.uplink_bytes, "downlink_bytes": self.downlink_bytes,
                "total_bytes": self.total_bytes}


class Wire:
    """Sends payloads: checks them, applies the transform to uplinks, records each, tallies bytes.

    Args:
        store: the run's payload store.
        policy: which payloads keep their tensors.
        sends: the payload kinds the protocol declared (``FederatedProtocol.sends``); any
            other kind is refused.
        trainer: the protocol's trainer; a client's gradient or model upload must carry a
            training record it issued.
        transform: a message transform applied to every uplink (None: sent as computed).
    """

    def __init__(self, store: PayloadStore, policy: CapturePolicy | AnyOf, *, sends: Collection[str], trainer: Trainer,
                 transform: MessageTransform | None = None) -> None:
        self.store = store
        self.policy = policy
        self.sends = frozenset(sends)
        self.trainer = trainer
        self.transform = transform
        self.bytes: dict[str, int] = defaultdict(int)
        self._received: dict[str, dict[str, torch.Tensor]] = {}

    @classmethod
    def for_protocol(cls, protocol: "FederatedProtocol", store: PayloadStore, policy: CapturePolicy | AnyOf, *,
                     transform: MessageTransform | None = None) -> "Wire":
        """The wire ``protocol`` may send on: its declared kinds, its trainer."""
        return cls(store, policy, sends=protocol.sends, trainer=protocol.trainer, transform=transform)

    def _check(self, payload: Payload) -> None:
        if payload.kind not in self.sends:
            raise WireError(f"{payload.id}: this protocol declared it sends {', '.join(sorted(self.sends)) or 'nothing'}, "
                            f"not {payload.kind}")
        spec = payload.spec
        if spec.direction == "up" and spec.carries in ("gradient", "model") and not self.trainer.issued(payload.training):
            raise WireError(f"{payload.id}: not trained by the configured trainer ({self.trainer.name}); a protocol "
                            "must train through its trainer so that defences inside training apply")

    def send(self, payload: Payload) -> Payload:
        """Check, defend (if uplink), record and count ``payload``; return what was sent."""
        return self.record(self.prepare(payload))

    def prepare(self, payload: Payload) -> Payload:
        """Check ``payload`` and apply the transform to an uplink; return it as it will be sent."""
        self._check(payload)
        if payload.direction == "down" and payload.tensors is not None:
            self._received[payload.receiver] = {**self._received.get(payload.receiver, {}), **payload.tensors}
        if self.transform is not None and payload.direction == "up":
            payload = self.transform.protect(payload, self._received.get(payload.sender))
        return payload

    def record(self, payload: Payload) -> Payload:
        """Keep ``payload`` in the store (its tensors if the policy says so) and count its bytes."""
        self.store.add(payload, keep=self.policy.keeps(payload))
        if not payload.spec.audit_only:
            self.bytes[payload.direction] += payload.nbytes
        return payload

    def capture(self, payload: Payload) -> Payload:
        """Record a message another process sent (checked and defended by its sender's ``Outbox``)."""
        if payload.kind not in self.sends:
            raise WireError(f"{payload.id}: this protocol declared it sends {', '.join(sorted(self.sends)) or 'nothing'}, "
                            f"not {payload.kind}")
        return self.record(payload)

    def totals(self) -> Totals:
        """Protocol bytes so far (uplink, downlink; audit-only gradients excluded)."""
        return Totals(self.bytes.get("up", 0), self.bytes.get("down", 0))


class Outbox(Wire):
    """A wire that keeps what is sent for a Flower message instead of recording it.

    A ClientApp sends its uploads through one (checked and defended where they are made);
    the server puts its downloads in one. The messages are recorded when they pass the
    server's grid (``privbench.flower.capture``).
    """

    def __init__(self, *, sends: Collection[str], trainer: Trainer, transform: MessageTransform | None = None) -> None:
        # no store and no policy: nothing is recorded here
        self.sends, self.trainer, self.transform = frozenset(sends), trainer, transform
        self.bytes = defaultdict(int)
        self._received = {}
        self.sent: list[Payload] = []

    def received(self, client: str, tensors: dict[str, torch.Tensor]) -> None:
        """Note what ``client`` received (a model upload's transform is relative to it)."""
        self._received[client] = {**self._received.get(client, {}), **tensors}

    def record(self, payload: Payload) -> Payload:
        self.sent.append(payload)
        return payload

    def take(self, receiver: str) -> list[Payload]:
        """Remove and return what was sent to ``receiver``."""
        out = [p for p in self.sent if p.receiver == receiver]
        self.sent = [p for p in self.sent if p.receiver != receiver]
        return out
