"""A protocol's client side: what each client does when the server asks (its round from the download, its local
training and upload, the reads it plans), apart from the server loop (``base.FederatedProtocol``), as Flower keeps
its ``ClientApp`` apart from its ``Strategy``."""
from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from privbench.data import FederatedData, ImageDataset
from privbench.errors import AttackNotApplicableError
from privbench.fl.engine import ClientSide, ClientTask, TaskReply
from privbench.fl.protocols.round import ClientRound, ClientStart, PendingUpload, Upload, victim_step
from privbench.fl.reads import AUDIT_GRADIENT, LOCAL_SGD, PlannedRead
from privbench.fl.sgd import State, model_with, parameters_of
from privbench.fl.trainer import LocalSGD, Regulariser, Trainer
from privbench.fl.vectorised import LocalJob
from privbench.payloads import LocalTraining, Payload
from privbench.payloads.encoding import decode
from privbench.payloads.transform import MessageTransform
from privbench.victim import Victim

#: A client task's implementation: the requests (all of that task) on a client side, one reply each.
TaskHandler = Callable[[Sequence[ClientTask], ClientSide], list[TaskReply]]


@dataclass
class Replay:
    """A client's round run again: its upload as the wire carries it, the message as the server reads it (decoded),
    its training record and the images it trained on."""

    upload: Upload
    message: Payload
    training: LocalTraining
    images: ImageDataset


def replay_inputs(recorded: Payload, base: Payload | None, data: FederatedData, indices: list[int], *,
                  device: torch.device, what: str) -> tuple[State, LocalTraining, ImageDataset]:
    """The download ``recorded`` started from, its declared training and the images ``indices`` it was computed
    from (on ``device``); refused in one line where the round cannot be run again as it ran."""
    training = recorded.training
    if base is None or base.tensors is None or training is None:
        raise AttackNotApplicableError(f"{recorded.id}: {what} needs the download it started from and its "
                                       "declared training")
    if training.penalty:
        raise AttackNotApplicableError(f"{recorded.id}: its local training adds a penalty ({sorted(training.penalty)}),"
                                       f" which {what} does not rerun")
    index = torch.tensor(indices, dtype=torch.long, device=data.train.images.device)
    return dict(base.tensors), training, data.train.subset(index).to(device)


def declared_sgd(training: LocalTraining) -> LocalSGD:
    """The local optimiser settings a training record declares."""
    return LocalSGD(epochs=training.epochs, lr=training.lr, batch_size=training.batch_size,
                    momentum=training.momentum)


class ProtocolClient:
    """The client side every protocol shares: the ``round`` task (``serve_round``: ``begin_round``, local training
    by the trainer, ``end_round``) and what a client's round reads. ``FederatedProtocol`` sets the settings."""

    name: ClassVar[str]
    #: ``replay_round`` draws the client's images itself, as its client code did (no ``replay_inputs`` needed).
    replays_own_data: ClassVar[bool] = False
    rounds: int
    sgd: LocalSGD
    trainer: Trainer
    vectorise: bool

    def local_job(self, model: nn.Module, data: ImageDataset, *, at: ClientRound,
                  regulariser: Regulariser | None = None) -> LocalJob:
        """Client ``at.client``'s local training this round, to be run by ``train_clients``."""
        return LocalJob(model, data, at.name, at.batch_generator(), regulariser)

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
            step = victim_step(self.trainer, self.sgd.lr, local, client_data, truth, at=at, base_id=start.base_id)
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

    def client_tasks(self) -> dict[str, TaskHandler]:
        """The client side, by task name (what an engine runs; on Flower, what a ClientApp answers)."""
        return {"round": self.serve_round}

    def serve(self, task: str, requests: Sequence[ClientTask], side: ClientSide) -> list[TaskReply]:
        """Run client task ``task`` for ``requests`` on ``side``."""
        handler = self.client_tasks().get(task)
        if handler is None:
            raise ValueError(f"{self.name} has no client task {task!r}; it has {', '.join(self.client_tasks())}")
        return handler(requests, side)

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

    def replay_round(self, trainer: Trainer, model: nn.Module, data: FederatedData, *, recorded: Payload,
                     images: ImageDataset | None, generator: torch.Generator, seed: int, victim: Victim,
                     base_id: str, transform: MessageTransform | None = None,
                     layers: tuple[str, ...] | None = None) -> Replay:
        """``recorded``'s client's round run again from the download ``model`` holds, with ``trainer`` in the run's
        trainer's place (a fresh copy, or one the audit instruments): the training ``recorded`` declares, on
        ``images`` (``replay_inputs``), drawing its batches from ``generator``, its update protected by ``transform``.
        The only way the audit reruns a client (an active server's round, a one-run audit's); a protocol whose
        client does more in a round (GENE-FL) overrides it with its own client code (``layers``: a recorded layer
        choice to keep)."""
        assert images is not None and recorded.training is not None, "replay_inputs gives the images and training"
        sent = parameters_of(model)
        local = copy.deepcopy(model)
        record = trainer.train(local, images, client=recorded.sender, sgd=declared_sgd(recorded.training),
                               generator=generator)
        message = Payload.from_tensors(kind="update", round=recorded.round, sender=recorded.sender,
                                       receiver="server", tensors=parameters_of(local), base=base_id, training=record)
        if transform is not None:
            message = decode(transform.protect(message, sent), sent)
        return Replay(Upload(record.num_samples, message, list(message.names)), message, record, images)
