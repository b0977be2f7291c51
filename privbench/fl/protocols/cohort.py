"""How the server learns a group's uploads: each one in the clear, or only their sum (secure aggregation).

A defence of the third shape: not a transform of one message (``MessageTransform``) nor a way of training
(``Trainer``) but a wrapper around a round's cohort. ``Aggregation.combine`` turns the uploads of one group
(FedAvg's round, one cluster of a clustered protocol) into the model the server keeps; an aggregation that
``seals`` the uploads gets a ``Sealed`` client wire, on which uploads are checked and defended where they are
made and then held for it, never recorded: the store then holds only what its own protocol sends.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from privbench.fl.aggregate import aggregate
from privbench.fl.protocols.round import Upload
from privbench.fl.sgd import State
from privbench.fl.wire import Wire
from privbench.payloads import Payload
from privbench.payloads.encoding import decode


class Sealed(Wire):
    """The clients' wire under secure aggregation: their uploads and gradients are prepared (checked, and defended
    by the message transform) as on the run's wire, then held with their ground truth instead of recorded; every
    other message goes to the run's wire."""

    def __init__(self, wire: Wire) -> None:
        self.inner = wire
        self.store, self.policy, self.sends, self.trainer = wire.store, wire.policy, wire.sends, wire.trainer
        self.transform, self.truth_of, self.bytes, self._received = (wire.transform, wire.truth_of, wire.bytes,
                                                                     wire._received)
        self.held: dict[str, list[int]] = {}

    def send(self, payload: Payload, *, truth: Sequence[int] = ()) -> Payload:
        prepared = self.inner.prepare(payload)
        if prepared.spec.client_own:
            self.held[prepared.id] = [int(i) for i in truth]
            return prepared
        return self.inner.record(prepared, truth=truth)


class Aggregation(ABC):
    """How a group's uploads become the server's model (the ``aggregation`` config group)."""

    name: ClassVar[str] = "aggregation"
    #: payload kinds it sends beyond the protocol's own.
    sends: ClassVar[tuple[str, ...]] = ()
    #: the server sees no individual upload, only each group's aggregate.
    seals: ClassVar[bool] = False
    #: runs with each client in a process of its own (``engine=flower``).
    runs_on_flower: ClassVar[bool] = True

    def client_wire(self, wire: Wire) -> Wire:
        """The wire the clients send on (``wire`` itself unless the uploads are sealed)."""
        return Sealed(wire) if self.seals else wire

    def secure_sum(self) -> Any:
        """The SecAgg+ a sealed cohort runs (its settings; on Flower, its workflow's): this aggregation's own."""
        return self

    def combine_aggregate(self, base: State, uploads: Sequence[Upload], *, round_: int, group: int | None) -> State:
        """A group's model from the engine's secure aggregate (Flower's SecAgg+ ran; each member's upload is the
        cohort's ``aggregate``): the aggregate itself."""
        made = uploads[0].tensors
        return {n: (made[n] if n in made else t).clone().to(t.device) for n, t in base.items()}

    def node_wire(self, wire: Wire) -> Wire:
        """The wire a client sends on in a process of its own (a Flower ClientApp): the clients' wire, except that
        sealing is Flower's SecAgg+ mod's work there."""
        return wire if self.seals else self.client_wire(wire)

    def check_cohorts(self, sizes: Sequence[int], *, weights: Sequence[int]) -> None:
        """Fail (``ConfigError``) before training where cohorts of ``sizes`` clients (clients of ``weights`` samples)
        cannot be aggregated with these settings (nothing to check by default)."""

    def plan(self, *, rounds: int, participants: int, victim_round: int, uploads: Sequence[str],
             sample_rate: float = 1.0, victims: Sequence[str] = ()) -> None:
        """Fail (``ConfigError``) before training where ``rounds`` rounds of ``participants`` clients sending
        ``uploads`` (the model-carrying kinds), each joining a round at ``sample_rate`` (Poisson; 1.0: a fixed-size
        draw; ``victims`` join their round whatever the draw), cannot run with these settings; calibrate what depends
        on them."""

    def rounds_allowed(self, rounds: int) -> int:
        """How many of ``rounds`` may run (fewer where a privacy budget stops training)."""
        return rounds

    @abstractmethod
    def combine(self, base: State, uploads: Sequence[Upload], *, round_: int, group: int | None, wire: Wire,
                seed: int, truth: Mapping[str, Sequence[int]] | None = None) -> State:
        """The model the server keeps from ``uploads`` (one group's, in the order asked) on top of ``base``.

        ``wire`` records what it sends; ``truth`` is the evaluator's ground truth of each held upload, by id.
        """

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Settings recorded with the results."""


class Plain(Aggregation):
    """The server reads every upload and averages each name over those that carry it, weighted by samples."""

    name = "plain"

    def combine(self, base: State, uploads: Sequence[Upload], *, round_: int, group: int | None, wire: Wire,
                seed: int, truth: Mapping[str, Sequence[int]] | None = None) -> State:
        """Each upload decoded (a compressed one against ``base``, the model its senders received), then averaged."""
        decoded = [decode(u.payload, base).tensors for u in uploads]
        return aggregate(base, [(u.num_samples, t) for u, t in zip(uploads, decoded) if t is not None])

    def describe(self) -> dict[str, Any]:
        return {"aggregation": self.name}


@dataclass(frozen=True)
class Cohort:
    """A run's aggregation bound to its wire, seed and the clients' wire: what a protocol's ``aggregate`` hook calls."""

    aggregation: Aggregation
    wire: Wire
    seed: int
    clients: Wire | None = None

    def combine(self, base: State, uploads: Sequence[Upload], *, round_: int, group: int | None = None) -> State:
        """``aggregation.combine`` of one group's uploads."""
        if uploads and all(u.payload.kind == "aggregate" for u in uploads):  # the engine aggregated securely (Flower)
            return self.aggregation.combine_aggregate(base, uploads, round_=round_, group=group)
        held = self.clients.held if isinstance(self.clients, Sealed) else {}
        return self.aggregation.combine(base, uploads, round_=round_, group=group, wire=self.wire, seed=self.seed,
                                        truth=held)
