"""Which recorded payload the attack reads: the victim's message of a given kind."""
from __future__ import annotations

from privbench.errors import PrivbenchError
from privbench.fl.victim import Victim
from privbench.payloads.payload import KINDS, Payload
from privbench.payloads.store import PayloadStore


class PayloadChoice:
    """The victim's ``kind`` payload in the victim round (``payload=<kind>`` in the CLI).

    Uplink kinds are those the victim sends; downlink kinds those it receives.
    """

    def __init__(self, *, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"payload.kind={kind!r} is not one of {', '.join(KINDS)}")
        self.kind = kind

    def select(self, store: PayloadStore, victim: Victim) -> tuple[Payload, Payload | None]:
        """The chosen payload and the base payload it is relative to (if recorded)."""
        end = "sender" if KINDS[self.kind] == "up" else "receiver"
        found = list(store.records(kind=self.kind, round=victim.round, **{end: victim.name}))
        if not found:
            raise PrivbenchError(f"no {self.kind} payload of {victim.name} in round {victim.round} was recorded")
        payload = store.load(found[0]["id"])
        base = store.load(payload.base) if payload.base else None
        return payload, base
