"""What rerunning a recorded round needs (the active server's round, a one-run audit's round): the recorded
reply's declared local training and the victim's images of that round, or a GENE-FL client's round run again by
GENE-FL's own client code."""
from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from privbench.data import FederatedData
from privbench.data.dataset import ImageDataset
from privbench.errors import AttackNotApplicableError
from privbench.fl.protocols.genefl import GeneFL
from privbench.fl.protocols.round import ClientRound, ClientStart, Upload
from privbench.fl.trainer import LocalSGD, Trainer
from privbench.fl.wire import Outbox
from privbench.payloads import LocalTraining, Payload
from privbench.payloads.transform import MessageTransform
from privbench.victim import Victim


def rerun_inputs(payload: Payload, base: Payload | None, data: FederatedData, indices: list[int], *,
                 device: torch.device, what: str) -> tuple[dict[str, torch.Tensor], LocalTraining, ImageDataset]:
    """The download ``payload`` started from, its declared training and the images ``indices`` it was computed
    from (on ``device``); refused in one line where the round cannot be rerun as it ran."""
    training = payload.training
    if base is None or base.tensors is None or training is None:
        raise AttackNotApplicableError(f"{payload.id}: {what} needs the download it started from and its "
                                       "declared training")
    if training.penalty:
        raise AttackNotApplicableError(f"{payload.id}: its local training adds a penalty ({sorted(training.penalty)}),"
                                       f" which {what} does not rerun")
    index = torch.tensor(indices, dtype=torch.long, device=data.train.images.device)
    return dict(base.tensors), training, data.train.subset(index).to(device)


def local_sgd(training: LocalTraining) -> LocalSGD:
    """The local optimiser settings a training record declares."""
    return LocalSGD(epochs=training.epochs, lr=training.lr, batch_size=training.batch_size,
                    momentum=training.momentum)


def gene_client_round(protocol: GeneFL, trainer: Trainer, model: nn.Module, download: dict[str, torch.Tensor],
                      data: FederatedData, *, sender: str, round_: int, cluster: int | None, base_id: str, seed: int,
                      victim: Victim, transform: MessageTransform | None = None,
                      layers: tuple[str, ...] | None = None) -> tuple[Upload, LocalTraining, ImageDataset]:
    """``sender``'s GENE-FL round from ``download`` (``model`` holds it) by GENE-FL's own client code (its Fisher
    pass, penalty, xi and layer choice, or the recorded choice ``layers``) with ``trainer`` in the run's trainer's
    place: its upload as encoded for the wire, its training record and the images it trained on."""
    rerun = copy.copy(protocol)
    rerun.trainer, rerun.replayed_layers = trainer, layers
    outbox = Outbox(sends=protocol.wire_kinds, trainer=trainer, transform=transform)
    outbox.received(sender, download)
    at = ClientRound(int(sender.removeprefix("client")), round_, seed, victim, outbox, cluster=cluster)
    local = copy.deepcopy(model)
    state = rerun.start(local, np.zeros(data.num_clients, dtype=int), download)
    pending = rerun.begin_round(local, ClientStart(at, download, base_id), data, state)
    training, = rerun.train_clients([pending.job])
    return rerun.end_round(pending, training, state), training, pending.job.data
