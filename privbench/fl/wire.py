"""The wire: every message crosses it, is checked, defended (uplink), counted, and kept or not."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from privbench.figures import DOWNLINK_BYTES, TOTAL_BYTES, UPLINK_BYTES
from privbench.fl.trainer import Trainer
from privbench.payloads import CapturePolicy, Payload, PayloadStore
from privbench.payloads.capture import AnyOf
from privbench.payloads.transform import MessageTransform


class Sender(Protocol):
    """What a wire needs of a protocol: the kinds it declared and its trainer."""

    @property
    def sends(self) -> tuple[str, ...]: ...

    @property
    def trainer(self) -> Trainer: ...


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
        return {UPLINK_BYTES.key: self.uplink_bytes, DOWNLINK_BYTES.key: self.downlink_bytes,
                TOTAL_BYTES.key: self.total_bytes}


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
        truth_of: the evaluator's ground truth for a message another process sent (``capture``):
            the train-set indices it was computed from, which never travel in a message.
    """

    def __init__(self, store: PayloadStore, policy: CapturePolicy | AnyOf, *, sends: Collection[str], trainer: Trainer,
                 transform: MessageTransform | None = None,
                 truth_of: Callable[[Payload], Sequence[int]] | None = None) -> None:
        self.truth_of = truth_of
        self.store = store
        self.policy = policy
        self.sends = frozenset(sends)
        self.trainer = trainer
        self.transform = transform
        self.bytes: dict[str, int] = defaultdict(int)
        self._received: dict[str, dict[str, torch.Tensor]] = {}

    @classmethod
    def for_protocol(cls, protocol: Sender, store: PayloadStore, policy: CapturePolicy | AnyOf, *,
                     transform: MessageTransform | None = None,
                     truth_of: Callable[[Payload], Sequence[int]] | None = None) -> "Wire":
        """The wire ``protocol`` may send on: its declared kinds, its trainer."""
        return cls(store, policy, sends=getattr(protocol, "wire_kinds", protocol.sends), trainer=protocol.trainer,
                   transform=transform,
                   truth_of=truth_of)

    def _check(self, payload: Payload) -> None:
        if payload.kind not in self.sends:
            raise WireError(f"{payload.id}: this protocol declared it sends {', '.join(sorted(self.sends)) or 'nothing'}, "
                            f"not {payload.kind}")
        spec = payload.spec
        if spec.client_own and not self.trainer.issued(payload.training):
            raise WireError(f"{payload.id}: not trained by the configured trainer ({self.trainer.name}); a protocol "
                            "must train through its trainer so that defences inside training apply")

    def send(self, payload: Payload, *, truth: Sequence[int] = ()) -> Payload:
        """Check, defend (if uplink), record and count ``payload``; return what was sent.

        ``truth`` (the train-set indices the message was computed from) goes to the store's
        ground-truth table, for the evaluator; it is not part of the message.
        """
        return self.record(self.prepare(payload), truth=truth)

    def prepare(self, payload: Payload) -> Payload:
        """Check ``payload`` and apply the transform to an uplink; return it as it will be sent."""
        self._check(payload)
        if payload.direction == "down" and payload.tensors is not None:
            self._received[payload.receiver] = {**self._received.get(payload.receiver, {}), **payload.tensors}
        if self.transform is not None and payload.direction == "up" and payload.spec.carries != "secret" \
                and not payload.spec.aggregate:  # key material and masked vectors, and the server's own aggregate
            payload = self.transform.protect(payload, self._received.get(payload.sender))
            try:
                payload.check_bytes()
            except ValueError as exc:
                raise WireError(f"defense={self.transform.name}: {exc}") from None
        return payload

    def record(self, payload: Payload, *, truth: Sequence[int] = ()) -> Payload:
        """Keep ``payload`` in the store (its tensors if the policy says so), its truth aside, and count its bytes."""
        self.store.add(payload, keep=self.policy.keeps(payload), truth=truth)
        if not payload.spec.audit_only:
            self.bytes[payload.direction] += payload.nbytes
        return payload

    def capture(self, payload: Payload) -> Payload:
        """Record a message another process sent (checked and defended by its sender's ``Outbox``)."""
        if payload.kind not in self.sends:
            raise WireError(f"{payload.id}: this protocol declared it sends {', '.join(sorted(self.sends)) or 'nothing'}, "
                            f"not {payload.kind}")
        return self.record(payload, truth=self.truth_of(payload) if self.truth_of is not None else ())

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
        self.sends, self.trainer, self.transform, self.truth_of = frozenset(sends), trainer, transform, None
        self.bytes = defaultdict(int)
        self._received = {}
        self.sent: list[Payload] = []

    def received(self, client: str, tensors: dict[str, torch.Tensor]) -> None:
        """Note what ``client`` received (a model upload's transform is relative to it)."""
        self._received[client] = {**self._received.get(client, {}), **tensors}

    def record(self, payload: Payload, *, truth: Sequence[int] = ()) -> Payload:
        self.sent.append(payload)  # the truth stays behind: it is the evaluator's, not part of the message
        return payload
