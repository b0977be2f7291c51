"""A client's round as the protocol's client side sees it: who trains when, what it started from, what it uploads."""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from privbench.data import ImageDataset
from privbench.fl.engine import TaskReply
from privbench.fl.reads import AUDIT_GRADIENT
from privbench.fl.sgd import State
from privbench.fl.trainer import Trainer
from privbench.fl.vectorised import LocalJob
from privbench.fl.wire import Wire
from privbench.payloads import LocalTraining, Payload
from privbench.victim import Victim


@dataclass(frozen=True)
class ClientRound:
    """Who trains when: client ``client`` of cluster ``cluster`` in round ``round``."""

    client: int
    round: int
    seed: int
    victim: Victim
    wire: Wire
    cluster: int | None = None

    @property
    def name(self) -> str:
        return f"client{self.client}"

    @property
    def is_victim(self) -> bool:
        return self.round == self.victim.round and self.victim.audits(self.client)

    def read_generator(self, read: str) -> torch.Generator:
        """Generator for the randomness of one read of private data (a DP mechanism's noise), fixed by
        ``(seed, round, client, read)``: two clients, rounds or reads never share a draw."""
        seed = int(np.random.SeedSequence([self.seed, self.round, self.client, *read.encode()]).generate_state(1)[0])
        return torch.Generator().manual_seed(seed)

    def batch_generator(self) -> torch.Generator:
        """Generator for the client's batch order in the round, fixed by ``(seed, round, client)``."""
        seed = int(np.random.SeedSequence([self.seed, self.round, self.client]).generate_state(1)[0])
        return torch.Generator().manual_seed(seed)


@dataclass(frozen=True)
class VictimStep:
    """The victim's audit gradient and what it then trains on.

    Attributes:
        gradient: the gradient as sent (after the trainer's protection).
        record: its training record.
        batch_truth: train-set indices of the victim batch (the gradient's images).
        data: what the victim trains on this round.
        truth: train-set indices of ``data``.
    """

    gradient: dict[str, torch.Tensor]
    record: LocalTraining
    batch_truth: np.ndarray
    data: ImageDataset
    truth: np.ndarray


@dataclass(frozen=True)
class ClientStart:
    """What the server sent a client this round: who, the state it starts from, that message's id."""

    at: ClientRound
    received: State
    base_id: str


@dataclass(frozen=True)
class Upload:
    """What a client's round returns to the server loop: its weight, the payload it uploaded, its layers."""

    num_samples: int
    payload: Payload
    layers: list[str]

    @property
    def tensors(self) -> State:
        """The uploaded tensors, as sent."""
        assert self.payload.tensors is not None, f"{self.payload.id}: an upload carries its tensors"
        return self.payload.tensors

    def reply(self) -> TaskReply:
        """The upload as a client's answer to the ``round`` task."""
        return TaskReply({"num_samples": self.num_samples, "layers": json.dumps(self.layers)}, self.payload)

    @classmethod
    def from_reply(cls, reply: TaskReply) -> "Upload":
        """The upload a ``round`` reply carries."""
        if reply.payload is None:
            raise ValueError("a round's reply carries its upload")
        return cls(int(reply.fields["num_samples"]), reply.payload, list(json.loads(str(reply.fields["layers"]))))


@dataclass(frozen=True)
class PendingUpload:
    """A client between its download and its upload: its local training job and what the upload needs.

    Attributes:
        at: the client and round.
        job: its local training (model trained in place, data, generator, penalty).
        truth: train-set indices of what it trains on.
        base_id: id of the model message it trains from.
        received: the state it started from.
        step: its audit gradient, when it is the victim this round.
    """

    at: ClientRound
    job: LocalJob
    truth: np.ndarray
    base_id: str
    received: State
    step: VictimStep | None = None


def victim_step(trainer: Trainer, lr: float, local: nn.Module, client_data: ImageDataset, truth: np.ndarray, *,
                at: ClientRound, base_id: str) -> VictimStep:
    """Send the victim's one-step gradient on its victim batch at the received model.

    Returns the gradient and its record, and the data the victim trains on this round:
    the victim batch when ``victim.update_data == "batch"``, else all of it.
    """
    victim = at.victim
    pos = victim.batch_positions(len(client_data), seed=at.seed)
    batch = torch.from_numpy(pos)
    x, y = client_data.normalised(batch), client_data.labels[batch]
    grad, record = trainer.gradient(local, x, y, client=at.name, lr=lr, generator=at.read_generator(AUDIT_GRADIENT))
    at.wire.send(Payload.from_tensors(kind="gradient", round=at.round, sender=at.name, receiver="server",
                                      tensors=grad, base=base_id, training=record), truth=truth[pos].tolist())
    if victim.update_data == "batch":
        return VictimStep(grad, record, truth[pos], client_data.subset(batch), truth[pos])
    return VictimStep(grad, record, truth[pos], client_data, truth)
