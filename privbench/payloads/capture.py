"""Capture policy: which recorded payloads keep their tensors (all are counted in bytes)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from privbench.errors import ConfigError
from privbench.payloads.kinds import KINDS
from privbench.payloads.payload import Payload


def _selector(value: str | Sequence, key: str) -> str | frozenset:
    if isinstance(value, str):
        if value not in ("all", "victim"):
            raise ConfigError(f"capture.{key}={value!r}: allowed 'all', 'victim' or a list")
        return value
    return frozenset(value)


@dataclass(frozen=True)
class CapturePolicy:
    """Keep a payload's tensors when its kind, round and client all match.

    ``rounds``/``clients`` may be ``"all"``, ``"victim"`` (the victim's round / the victim
    client) or explicit lists; ``kinds`` may be ``"all"`` or a list of payload kinds. The
    default keeps every message the victim sends or receives in the victim round, which is
    what every attack on the victim needs, and nothing else.
    """

    kinds: str | frozenset = "all"
    rounds: str | frozenset = "victim"
    clients: str | frozenset = "victim"
    victim_round: int = 0
    victim_client: int = 0

    @classmethod
    def build(cls, *, kinds: str | Sequence = "all", rounds: str | Sequence = "victim", clients: str | Sequence = "victim",
              victim_round: int, victim_client: int) -> "CapturePolicy":
        kinds_sel = kinds if kinds == "all" else frozenset(kinds)
        if kinds_sel != "all":
            unknown = sorted(set(kinds_sel) - set(KINDS))
            if unknown:
                raise ConfigError(f"capture.kinds: unknown {unknown}; allowed: all or a list of {', '.join(KINDS)}")
        return cls(kinds_sel, _selector(rounds, "rounds"), _selector(clients, "clients"), victim_round, victim_client)

    def check(self, *, sends: Sequence[str], rounds: int, clients: int) -> None:
        """Refuse kinds the protocol never sends, and rounds or clients that do not exist."""
        if self.kinds != "all":
            never = sorted(set(self.kinds) - set(sends))
            if never:
                raise ConfigError(f"capture.kinds: this protocol never sends {', '.join(never)}; it sends "
                                  f"{', '.join(sends) or 'nothing'}")
        for key, chosen, limit in (("rounds", self.rounds, rounds), ("clients", self.clients, clients)):
            if isinstance(chosen, frozenset):
                bad = [v for v in chosen if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < limit]
                if bad:
                    raise ConfigError(f"capture.{key}: {bad[0]!r} is not one of 0..{limit - 1}")

    def keeps(self, payload: Payload) -> bool:
        """Whether ``payload``'s tensors are written to the store."""
        if self.kinds != "all" and payload.kind not in self.kinds:
            return False
        rounds = {self.victim_round} if self.rounds == "victim" else self.rounds
        if rounds != "all" and payload.round not in rounds:
            return False
        if self.clients == "all":
            return True
        clients = {self.victim_client} if self.clients == "victim" else self.clients
        ends = {payload.sender, payload.receiver}
        return any(f"client{c}" in ends for c in clients)


@dataclass(frozen=True)
class AnyOf:
    """Keeps a payload when any of its policies does."""

    policies: tuple[CapturePolicy, ...]

    def keeps(self, payload: Payload) -> bool:
        return any(p.keeps(payload) for p in self.policies)
