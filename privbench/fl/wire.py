"""The wire: every message crosses it, is defended (uplink), counted, and kept or not."""
from __future__ import annotations

from collections import defaultdict

from privbench.payloads import CapturePolicy, Payload, PayloadStore
from privbench.payloads.capture import AnyOf
from privbench.payloads.payload import AUDIT_ONLY


class Wire:
    """Sends payloads: applies the defence to uplinks, records each, tallies bytes.

    Args:
        store: the run's payload store.
        policy: which payloads keep their tensors.
        defense: object with ``protect(payload) -> payload``, applied to every uplink.
    """

    def __init__(self, store: PayloadStore, policy: "CapturePolicy | AnyOf", defense=None) -> None:
        self.store = store
        self.policy = policy
        self.defense = defense
        self.bytes: dict[str, int] = defaultdict(int)
        self._received: dict[str, dict] = {}

    def send(self, payload: Payload) -> Payload:
        """Defend (if uplink), record and count ``payload``; return what was sent."""
        if payload.direction == "down" and payload.tensors is not None:
            self._received[payload.receiver] = {**self._received.get(payload.receiver, {}), **payload.tensors}
        if self.defense is not None and payload.direction == "up":
            payload = self.defense.protect(payload, self._received.get(payload.sender))
        self.store.add(payload, keep=self.policy.keeps(payload))
        if payload.kind not in AUDIT_ONLY:
            self.bytes[payload.direction] += payload.nbytes
        return payload

    def totals(self) -> dict[str, int]:
        """Protocol bytes so far (uplink, downlink, total; audit-only gradients excluded)."""
        up, down = self.bytes.get("up", 0), self.bytes.get("down", 0)
        return {"uplink_bytes": up, "downlink_bytes": down, "total_bytes": up + down}
