"""The engine contract: the server loop asks for named client tasks; an engine runs them where the clients are.

A protocol's client side answers ``serve(task, requests, side)`` (Flower's named task
dispatch is the model); an engine runs a list of requests, in this process (all at once,
so a round can be trained stacked) or one message per client on Flower. A ``Launcher``
(the ``engine`` config group) brings an engine up for one run.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, Union

from torch import nn

from privbench.data import FederatedData
from privbench.fl.sgd import State
from privbench.fl.wire import Wire
from privbench.payloads import Payload
from privbench.victim import Victim

T = TypeVar("T")
#: A scalar a task or its reply carries (a Flower ``ConfigRecord`` value).
Field = Union[int, float, str]


@dataclass(frozen=True)
class ClientTask:
    """One client's work that the server asks for.

    Attributes:
        task: the task's name (a key of the protocol's ``client_tasks``).
        client: the client's index (among the agnostic clients when ``agnostic``).
        round: the round it belongs to.
        downloads: what the server sent it for this task, as sent.
        fields: scalar settings of the task (for example the client's cluster).
        agnostic: an agnostic client (it joins after training).
    """

    task: str
    client: int
    round: int
    downloads: tuple[Payload, ...] = ()
    fields: Mapping[str, Field] = field(default_factory=dict)
    agnostic: bool = False

    @property
    def name(self) -> str:
        return f"agnostic{self.client}" if self.agnostic else f"client{self.client}"


@dataclass(frozen=True)
class TaskReply:
    """What a client answers: scalar fields and, where the server reads one, the payload it sent (as sent)."""

    fields: Mapping[str, Field] = field(default_factory=dict)
    payload: Payload | None = None


@dataclass
class ClientSide:
    """What a client's code runs with.

    Attributes:
        model: the model (architecture and device; a client trains a copy).
        data: the federation's data (a client reads only its own part).
        state: the protocol's client-side state (its run state in process; a node's own copy on Flower).
        wire: where the client's messages go (the run's wire in process; an ``Outbox`` on a node).
        seed: the run's seed.
        victim: the audited client.
        theta0: the shared initialisation.
    """

    model: nn.Module
    data: FederatedData
    state: Any
    wire: Wire
    seed: int
    victim: Victim
    theta0: State


class ClientTasks(Protocol):
    """What an engine runs: a protocol's client side, by task name."""

    def serve(self, task: str, requests: Sequence[ClientTask], side: ClientSide) -> list[TaskReply]:
        """Run ``task`` for every request (the same task) on ``side``; one reply per request, in order."""
        ...

    def check_reply(self, request: ClientTask, reply: TaskReply, sent: Sequence[Payload], side: ClientSide) -> None:
        """Raise ``ValueError`` (the reason) for a reply from another process that is not what was asked."""
        ...

    def check_sealed(self, request: ClientTask, fields: Mapping[str, Any], side: ClientSide) -> None:
        """Raise ``ValueError`` (the reason) for a secure round's reply whose clear fields are not what was planned."""
        ...

    def receive_report(self, request: ClientTask, report: str | None, side: ClientSide) -> None:
        """Record what a client in another process reports of its reads (and its DP accounting) with a reply that
        passed ``check_reply``; ``ValueError`` (the reason) for a report that is not what the server planned."""
        ...


class Engine(ABC):
    """Runs client tasks and hands back the replies; records every message once."""

    name: str = "engine"

    def downlink_wire(self, wire: Wire) -> Wire:
        """The wire the server sends downloads on (``wire`` itself in this process)."""
        return wire

    @abstractmethod
    def run(self, protocol: ClientTasks, requests: Sequence[ClientTask], side: ClientSide) -> list[TaskReply]:
        """Run ``requests`` (all of one task) on the clients; ``side`` is the server process's view of them."""


class Launcher(ABC):
    """Brings an engine up for one run (the ``engine`` config group) and runs the run's session on it."""

    name: str = "launcher"

    def problem(self, protocol: Any) -> str | None:
        """Why ``protocol``'s settings cannot run on this engine (None: they can)."""
        return None

    @abstractmethod
    def launch(self, session: Callable[[Engine], T], *, config: str, wire: Wire, num_clients: int,
               num_agnostic: int) -> T:
        """Run ``session`` with an engine whose clients are ``num_clients`` known and ``num_agnostic`` agnostic ones.

        ``config`` is the run's resolved config (YAML), which a remote client rebuilds the run from;
        ``wire`` records every message.
        """
