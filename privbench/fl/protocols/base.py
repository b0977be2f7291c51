"""What every federated protocol shares: settings, its trainer, sampling, the server loop and its hooks, the client
side's round and the evaluator's ground truth."""
from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from torch import nn

from privbench.data import FederatedData, ImageDataset
from privbench.errors import ConfigError
from privbench.fl.engine import ClientSide, ClientTask, Engine, InProcess, TaskReply
from privbench.fl.protocols.cohort import Aggregation, Cohort, Plain
from privbench.fl.protocols.result import ProtocolResult, RoundRecord
from privbench.fl.protocols.round import ClientRound, ClientStart, PendingUpload, Upload, VictimStep
from privbench.fl.reads import AUDIT_GRADIENT, LOCAL_SGD, PlannedRead
from privbench.fl.sgd import State, client_accuracy, model_with, parameters_of
from privbench.fl.trainer import LocalSGD, Regulariser, SGDTrainer, Trainer
from privbench.fl.vectorised import LocalJob
from privbench.fl.wire import Wire
from privbench.payloads import KINDS, LocalTraining, Payload
from privbench.victim import Victim

T = TypeVar("T")
#: A client task's implementation: the requests (all of that task) on a client side, one reply each.
TaskHandler = Callable[[Sequence[ClientTask], ClientSide], list[TaskReply]]


class FederatedProtocol(ABC):
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

    def __init__(self, *, rounds: int, participants: int, local_epochs: int, lr: float, batch_size: int,
                 momentum: float = 0.0, trainer: Trainer | None = None, vectorise: bool = False,
                 aggregation: Aggregation | None = None, sampling: str = "fixed") -> None:
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

    def local_job(self, model: nn.Module, data: ImageDataset, *, at: ClientRound,
                  regulariser: Regulariser | None = None) -> LocalJob:
        """Client ``at.client``'s local training this round, to be run by ``train_clients``."""
        return LocalJob(model, data, at.name, self.client_seed(at), regulariser)

    def train_clients(self, jobs: Sequence[LocalJob]) -> list[LocalTraining]:
        """Run a round's local training jobs by the protocol's trainer (stacked with ``fl.vectorise``)."""
        return self.trainer.train_all(jobs, sgd=self.sgd, vectorise=self.vectorise)

    def begin_round(self, model: nn.Module, start: ClientStart, data: FederatedData, state: Any) -> PendingUpload:
        """Client ``start.at.client`` after its download: the victim sends its audit gradient; its training job."""
        at = start.at
        local = model_with(model, start.received)
        client_data, truth = data.client(at.client), data.clients[at.client]
        step = None
        if at.is_victim:
            step = self.victim_gradient(local, client_data, truth, at=at, base_id=start.base_id)
            client_data, truth = step.data, step.truth
        job = self.local_job(local, client_data, at=at, regulariser=self.regulariser(local, client_data, at))
        return PendingUpload(at, job, truth, start.base_id, start.received, step)

    def regulariser(self, local: nn.Module, data: ImageDataset, at: ClientRound) -> Regulariser | None:
        """The penalty of the client's local loss on ``data`` this round (none by default)."""
        return None

    def end_round(self, pending: PendingUpload, training: LocalTraining, state: Any) -> Upload:
        """After local training: the client sends its upload; returns what the server aggregates."""
        raise NotImplementedError(f"{self.name} sends no upload")

    def planned_reads(self, num_samples: int, *, victim: Victim | None) -> list[PlannedRead]:
        """The reads of a client with ``num_samples`` that joins every round (``victim`` if it is the victim).

        In the victim round the victim sends its audit gradient, and with
        ``victim.update_data == "batch"`` trains on its victim batch only.
        """
        return [read for r in range(self.rounds) for read in self.round_reads(num_samples, r, victim=victim)]

    def round_reads(self, num_samples: int, round_: int, *, victim: Victim | None) -> list[PlannedRead]:
        """The reads of round ``round_`` of a client with ``num_samples`` (``victim`` if it is audited)."""
        reads, n = [], num_samples
        if victim is not None and round_ == victim.round:
            reads.append(PlannedRead(AUDIT_GRADIENT, victim.num_images))
            if victim.update_data == "batch":
                n = victim.num_images
        return [*reads, PlannedRead(LOCAL_SGD, n, self.sgd.batch_size, self.sgd.epochs)]

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
        if not 0 <= victim.client < data.num_clients:
            raise ConfigError(f"victim.client={victim.client} must be in 0..{data.num_clients - 1}")
        outside = [c for c in victim.listed if not 0 <= c < data.num_clients]
        if outside:
            raise ConfigError(f"victim.clients: {outside[0]} is not one of 0..{data.num_clients - 1}")
        if len(victim.listed) > self.participants:
            raise ConfigError(f"victim.clients names {len(victim.listed)} clients (victim.client included) but only "
                              f"fl.participants={self.participants} take part in a round")
        for c in victim.listed[1:]:
            victim.alone(c).batch_positions(len(data.clients[c]), seed=0)
        if not 0 <= victim.round < self.rounds:
            raise ConfigError(f"victim.round={victim.round} must be in 0..{self.rounds - 1} (fl.rounds={self.rounds})")
        victim.batch_positions(len(data.clients[victim.client]), seed=0)
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
        rng = np.random.default_rng([seed, round_])
        if self.sampling == "poisson":
            joins = rng.random(num_clients) < self.sample_rate(num_clients)
            drawn = {int(c) for c in np.flatnonzero(joins)}
            return sorted(drawn | (set(victim.listed) if round_ == victim.round else set()))
        chosen = [int(c) for c in rng.choice(num_clients, self.participants, replace=False)]
        if round_ == victim.round:
            for v in victim.listed:
                if v not in chosen:
                    spare = max(i for i, c in enumerate(chosen) if c not in victim.listed)
                    chosen[spare] = v
        return sorted(chosen)

    def victim_gradient(self, local: nn.Module, client_data: ImageDataset, truth: np.ndarray, *, at: ClientRound,
                        base_id: str) -> VictimStep:
        """Send the victim's one-step gradient on its victim batch at the received model.

        Returns the gradient and its record, and the data the victim trains on this round:
        the victim batch when ``victim.update_data == "batch"``, else all of it.
        """
        victim = at.victim
        pos = victim.batch_positions(len(client_data), seed=at.seed)
        batch = torch.from_numpy(pos)
        x, y = client_data.normalised(batch), client_data.labels[batch]
        grad, record = self.trainer.gradient(local, x, y, client=at.name, lr=self.sgd.lr,
                                             generator=self.read_seed(at, AUDIT_GRADIENT))
        at.wire.send(Payload.from_tensors(kind="gradient", round=at.round, sender=at.name, receiver="server",
                                          tensors=grad, base=base_id, training=record), truth=truth[pos].tolist())
        if victim.update_data == "batch":
            return VictimStep(grad, record, truth[pos], client_data.subset(batch), truth[pos])
        return VictimStep(grad, record, truth[pos], client_data, truth)

    def truth_of(self, payload: Payload, data: FederatedData, victim: Victim, *, seed: int) -> list[int]:
        """The evaluator's ground truth for ``payload``: the train-set indices it was computed from, as this
        protocol's clients compute them (``begin_round``, ``victim_gradient``, ``send_subspace``). For messages
        recorded where they pass the server (Flower), whose messages never carry it.
        """
        if payload.direction == "down" or payload.spec.aggregate or (payload.spec.carries == "secret"
                                                                       and payload.kind != "masked_upload"):
            return []
        agnostic = payload.phase == "agnostic"
        c = int(payload.sender.removeprefix("agnostic" if agnostic else "client"))
        held = (data.agnostic_clients if agnostic else data.clients)[c]
        if payload.kind == "subspace" or agnostic:
            return [int(i) for i in held]
        if payload.round == victim.round and victim.audits(c):
            batch = held[victim.batch_positions(len(held), seed=seed)]
            if payload.spec.carries == "gradient" or victim.update_data == "batch":
                return [int(i) for i in batch]
        return [int(i) for i in held]

    @staticmethod
    def known_accuracy(model: nn.Module, data: FederatedData,
                       state_of: Callable[[int], State]) -> tuple[float, dict[int, float]]:
        """Pooled accuracy over known clients, each scored with ``state_of(client)`` on its own classes,
        and each client's own accuracy."""
        correct = total = 0.0
        per_client: dict[int, float] = {}
        for c in range(data.num_clients):
            model.load_state_dict(state_of(c))
            acc, n = client_accuracy(model, data.test, data.client_classes(c))
            per_client[c] = acc
            correct, total = correct + acc * n, total + n
        return correct / max(total, 1), per_client

    @staticmethod
    def read_seed(at: ClientRound, read: str) -> torch.Generator:
        """Generator for the randomness of one read of private data (a DP mechanism's noise), fixed by
        ``(seed, round, client, read)``: two clients, rounds or reads never share a draw."""
        seed = int(np.random.SeedSequence([at.seed, at.round, at.client, *read.encode()]).generate_state(1)[0])
        return torch.Generator().manual_seed(seed)

    @staticmethod
    def client_seed(at: ClientRound) -> torch.Generator:
        """Generator for a client's batch order in a round, fixed by ``(seed, round, client)``."""
        seed = int(np.random.SeedSequence([at.seed, at.round, at.client]).generate_state(1)[0])
        return torch.Generator().manual_seed(seed)

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

    def client_tasks(self) -> dict[str, TaskHandler]:
        """The client side, by task name (what an engine runs; on Flower, what a ClientApp answers)."""
        return {"round": self.serve_round}

    def serve(self, task: str, requests: Sequence[ClientTask], side: ClientSide) -> list[TaskReply]:
        """Run client task ``task`` for ``requests`` on ``side``."""
        handler = self.client_tasks().get(task)
        if handler is None:
            raise ValueError(f"{self.name} has no client task {task!r}; it has {', '.join(self.client_tasks())}")
        return handler(requests, side)

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

    def planned_penalty(self) -> tuple[dict[str, float], float]:
        """The settings and proximal weight of the penalty a client's training record declares (none by default)."""
        return {}, 0.0

    def upload_layers(self, upload: Payload | None, side: ClientSide) -> list[str]:
        """The layer list a ``round`` reply sends with ``upload`` (none by default: the whole model)."""
        return []

    def remote_state(self, side: ClientSide) -> Any:
        """The client-side state a node that runs this protocol's clients keeps (None: none)."""
        return None

    def start_state(self, request: ClientTask, side: ClientSide) -> State:
        """The state a client starts its round from: what it downloaded."""
        received: State = {}
        for down in request.downloads:
            assert down.tensors is not None, f"{down.id}: a download carries its tensors"
            received.update({n: t.clone() for n, t in down.tensors.items()})
        return received

    def serve_round(self, requests: Sequence[ClientTask], side: ClientSide) -> list[TaskReply]:
        """The ``round`` task: each client from its download (audit gradient, local training, upload), the round's
        clients trained together."""
        starts = []
        for req in requests:
            cluster = req.fields.get("cluster")
            at = ClientRound(req.client, req.round, side.seed, side.victim, side.wire,
                             cluster=None if cluster is None else int(cluster))
            starts.append(ClientStart(at, self.start_state(req, side), req.downloads[-1].id))
        pending = [self.begin_round(side.model, s, side.data, side.state) for s in starts]
        trainings = self.train_clients([p.job for p in pending])
        return [self.end_round(p, t, side.state).reply() for p, t in zip(pending, trainings)]
