"""What every federated protocol shares: settings, its trainer, sampling, the checks before training and the server
loop with its hooks; the client side is ``client.ProtocolClient``."""
from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Annotated, Any, ClassVar, TypeVar

from torch import nn

from privbench.data import FederatedData
from privbench.errors import ConfigError
from privbench.fl.engine import ClientSide, ClientTask, Engine, InProcess, TaskReply
from privbench.fl.protocols.client import ProtocolClient
from privbench.fl.protocols.cohort import Aggregation, Cohort, Plain
from privbench.fl.protocols.result import ProtocolResult, RoundRecord
from privbench.fl.protocols.sampling import draw_participants
from privbench.fl.reads import PlannedRead
from privbench.fl.sgd import parameters_of
from privbench.fl.trainer import LocalSGD, SGDTrainer, Trainer
from privbench.fl.wire import Wire
from privbench.payloads import KINDS, Payload
from privbench.schema import Number, PositiveInt, Rate, Switch
from privbench.victim import Victim

T = TypeVar("T")


class FederatedProtocol(ProtocolClient, ABC):
    """A federated protocol with rounds of sampled participants and local training by its trainer.

    Args:
        rounds: number of communication rounds.
        participants: clients sampled per round (without replacement).
        local_epochs: local epochs per round.
        lr: local SGD learning rate.
        batch_size: local batch size.
        momentum: local SGD momentum.
        trainer: how clients train (plain SGD by default, DP-SGD with ``defense=dpsgd``).
        vectorise: train a round's clients as one stacked model (``torch.func.vmap``), equal to
            one by one within float tolerance; see ``Trainer.train_all`` for when it applies.
        aggregation: how the server learns a group's uploads (plain by default; ``aggregation=secagg``).
        sampling: ``fixed`` (``participants`` clients a round, without replacement) or ``poisson`` (each client
            joins each round independently at rate ``participants / num_clients``; FedAvg only).

    The server loop is ``run``: ``setup``, then per round ``configure_round`` (sample, send the
    downloads), the engine runs the clients' tasks, ``aggregate`` and ``evaluate``; ``result``
    ends it. A protocol fills in those hooks, and its client side in ``client_tasks``.
    """

    name: ClassVar[str] = "protocol"
    #: payload kinds this protocol sends; the wire refuses any other.
    sends: ClassVar[tuple[str, ...]] = ()
    #: whether its rounds work with cohorts of any size (``fl.sampling=poisson``).
    poisson_sampling: ClassVar[bool] = False

    def __init__(self, *, rounds: PositiveInt, participants: PositiveInt, local_epochs: PositiveInt, lr: Rate,
                 batch_size: PositiveInt, momentum: Annotated[float, Number(low=0, high=1, open_high=True)] = 0.0,
                 trainer: Trainer | None = None, vectorise: Switch = False, aggregation: Aggregation | None = None,
                 sampling: str = "fixed") -> None:
        for key, value, low in (("rounds", rounds, 1), ("participants", participants, 1),
                                ("local_epochs", local_epochs, 1), ("batch_size", batch_size, 1)):
            if value < low:
                raise ConfigError(f"fl.{key} must be >= {low}, got {value}")
        if lr <= 0:
            raise ConfigError(f"fl.lr must be > 0, got {lr}")
        if not 0 <= momentum < 1:
            raise ConfigError(f"fl.momentum must be in [0, 1), got {momentum}")
        self.rounds, self.participants = rounds, participants
        self.sgd = LocalSGD(epochs=local_epochs, lr=lr, batch_size=batch_size, momentum=momentum)
        self.trainer: Trainer = trainer if trainer is not None else SGDTrainer()
        self.vectorise = bool(vectorise)
        self.aggregation: Aggregation = aggregation if aggregation is not None else Plain()
        if sampling not in ("fixed", "poisson"):
            raise ConfigError(f"fl.sampling={sampling!r}: one of fixed, poisson")
        self.sampling = sampling

    @property
    def wire_kinds(self) -> tuple[str, ...]:
        """Every kind this run's wire carries: the protocol's own and its aggregation's."""
        return tuple(self.sends) + tuple(k for k in self.aggregation.sends if k not in self.sends)

    @property
    def readable_kinds(self) -> tuple[str, ...]:
        """The kinds of ``wire_kinds`` whose tensors reach the server (a secure aggregation seals the uploads)."""
        if not self.aggregation.seals:
            return self.wire_kinds
        return tuple(k for k in self.wire_kinds if not KINDS[k].client_own)

    def plan_reads(self, data: FederatedData, victim: Victim) -> None:
        """Give the trainer every known client's planned reads (a DP trainer calibrates its noise to them)."""
        for c in range(data.num_clients):
            self.trainer.plan(f"client{c}", self.planned_reads(len(data.clients[c]),
                                                               victim=victim if victim.audits(c) else None))

    def remote_problem(self) -> str | None:
        """Why these settings cannot run with each client in a process of its own (None: they can)."""
        if self.vectorise:
            return "fl.vectorise=true stacks a round's clients in one process; on Flower each ClientApp trains its own"
        if not self.aggregation.runs_on_flower:
            return f"aggregation={self.aggregation.name} runs in process only so far; use engine=inprocess"
        if self.aggregation.seals and "learngene" in self.sends:
            return (f"aggregation={self.aggregation.name}: Flower's SecAgg+ sums one layout (the whole model), and "
                    f"{self.name}'s learnGenes differ by client; use engine=inprocess")
        if self.aggregation.seals and type(self.trainer) is not SGDTrainer:
            return (f"aggregation={self.aggregation.name} with the {self.trainer.name} trainer: Flower's SecAgg+ mod "
                    "answers for the ClientApp, so its privacy accounting would not come back; use engine=inprocess")
        return None

    def check_model(self, model: nn.Module) -> None:
        """Fail before training if the settings cannot run on ``model`` (a protocol with per-layer settings)."""

    def check(self, *, data: FederatedData, victim: Victim) -> None:
        """Fail before training if the settings cannot run on ``data`` with ``victim``."""
        if self.participants > data.num_clients:
            raise ConfigError(f"fl.participants={self.participants} exceeds data.num_clients={data.num_clients}")
        victim.check_fits(client_sizes=[len(c) for c in data.clients], participants=self.participants,
                          rounds=self.rounds)
        if self.sampling == "poisson" and not self.poisson_sampling:
            raise ConfigError(f"fl.sampling=poisson: {self.name} needs fixed-size cohorts (its clusters assume them); "
                              "use fl=fedavg")
        if self.sampling == "poisson" and self.aggregation.seals:
            raise ConfigError(f"fl.sampling=poisson with aggregation={self.aggregation.name}: secure aggregation is "
                              "set up for a known cohort size; use fl.sampling=fixed")
        self.aggregation.check_cohorts(self.cohort_sizes(), weights=[len(c) for c in data.clients])
        self.aggregation.plan(rounds=self.rounds, participants=self.participants, victim_round=victim.round,
                              uploads=[k for k in self.sends if KINDS[k].client_own and KINDS[k].carries == "model"],
                              sample_rate=self.sample_rate(data.num_clients),
                              victims=[f"client{c}" for c in victim.listed])

    def cohort_sizes(self) -> list[int]:
        """The sizes a round's cohort (the clients aggregated together) can have: every participant."""
        return [self.participants]

    def sample_rate(self, num_clients: int) -> float:
        """The rate at which a client joins a round under Poisson sampling (1.0 under fixed-size sampling: no
        amplification by sampling is claimed for a seeded fixed-size draw)."""
        return self.participants / num_clients if self.sampling == "poisson" else 1.0

    def sample(self, round_: int, num_clients: int, *, seed: int, victim: Victim) -> list[int]:
        """Participants of ``round_``: a seeded draw; the listed victims are swapped in on their round.

        Fixed-size: a missing victim replaces the last drawn client that is not a victim. Poisson: each client
        joins at ``sample_rate``, and the victims join their round besides (the audit's worst case).
        """
        return draw_participants(round_, num_clients, participants=self.participants, seed=seed, victim=victim,
                                 rate=self.sample_rate(num_clients) if self.sampling == "poisson" else None)

    #: How this protocol's rounds are named in progress output (the FedAvg reference renames its own).
    phase_name = ""

    def progress(self, iterable: Sequence[T]) -> Iterator[T]:
        """The rounds, shown as one progress phase named after the protocol."""
        from privbench.progress import phase

        with phase(self.phase_name or f"{self.name} training", total=len(iterable), unit="round") as bar:
            for item in iterable:
                yield item
                bar.update(1)

    def run(self, *, model: nn.Module, data: FederatedData, victim: Victim, wire: Wire, seed: int,
            engine: Engine | None = None) -> ProtocolResult:
        """Train from ``model``'s parameters, sending every message through ``wire``; ``model`` is not changed.

        ``engine`` runs the clients' tasks (None: in this process).
        """
        engine = engine or InProcess()
        self.plan_reads(data, victim)
        scratch = copy.deepcopy(model)
        clients = self.aggregation.client_wire(wire)
        side = ClientSide(model, data, None, clients, seed, victim, parameters_of(model))
        cohort = Cohort(self.aggregation, wire, seed, clients)
        side.state = self.setup(engine, side)
        history: list[RoundRecord] = []
        allowed = self.aggregation.rounds_allowed(self.rounds)
        for r in self.progress(range(allowed)):
            requests = self.configure_round(side.state, r, side, engine.downlink_wire(wire))
            replies = engine.run(self, requests, side)
            self.aggregate(side.state, requests, replies, cohort)
            wire.store.flush()
            history.append(self.evaluate(side.state, r, scratch, side))
        return self.result(side.state, tuple(history), side)

    def setup(self, engine: Engine, side: ClientSide) -> Any:
        """The run's server state before round 0 (made by ``run``, never kept on the protocol)."""
        return None

    @abstractmethod
    def configure_round(self, state: Any, round_: int, side: ClientSide, down: Wire) -> list[ClientTask]:
        """Sample round ``round_``'s clients and send each its download on ``down``; the tasks to run."""

    def aggregate(self, state: Any, requests: Sequence[ClientTask], replies: Sequence[TaskReply],
                  cohort: Cohort) -> None:
        """Fold the round's replies into ``state`` (nothing by default); ``cohort.combine`` averages a group's."""

    @abstractmethod
    def evaluate(self, state: Any, round_: int, scratch: nn.Module, side: ClientSide) -> RoundRecord:
        """The round's record (accuracy, bytes so far); ``scratch`` is a model to load states into."""

    @abstractmethod
    def result(self, state: Any, history: tuple[RoundRecord, ...], side: ClientSide) -> ProtocolResult:
        """The run's outcome."""

    def receive_report(self, request: ClientTask, report: str | None, side: ClientSide) -> None:
        """The client's report of its reads (and a DP trainer's accountant events) becomes the server's record of
        ``request``'s client (``Trainer.compose_report``, which checks it against ``task_reads``)."""
        self.trainer.compose_report(request.name, report, planned=self.task_reads(request, side))

    def check_reply(self, request: ClientTask, reply: TaskReply, sent: Sequence[Payload], side: ClientSide) -> None:
        """Refuse (``ValueError``, the reason) a reply that is not what the server asked for: only the asked client's
        uploads of kinds this protocol sends, for the asked round; floating, finite tensors with the model's names,
        shapes and dtypes, every tensor a kind must carry, the training record the server planned; for a ``round``,
        the upload it names, the sample count and layers the server planned (``privbench.fl.protocols.replies``)."""
        from privbench.fl.protocols.replies import check_reply

        check_reply(self, request, reply, sent, side)

    def check_sealed(self, request: ClientTask, fields: Mapping[str, Any], side: ClientSide) -> None:
        """Refuse (``ValueError``) a secure round's reply whose clear fields (sample count, layers, training record)
        are not what the server planned (``privbench.fl.protocols.replies.check_sealed``)."""
        from privbench.fl.protocols.replies import check_sealed

        check_sealed(self, request, fields, side)

    def task_reads(self, request: ClientTask, side: ClientSide) -> list[PlannedRead]:
        """The reads the server planned for ``request`` (what its client's report must name): a ``round``'s."""
        if request.task != "round" or request.agnostic:
            return []
        c, victim = request.client, side.victim
        return self.round_reads(len(side.data.clients[c]), request.round, victim=victim if victim.audits(c) else None)

