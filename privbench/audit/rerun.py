"""What rerunning a recorded round needs (the active server's round, a one-run audit's round): the recorded
reply's declared local training, and the victim's images of that round."""
from __future__ import annotations

import torch

from privbench.data import FederatedData
from privbench.data.dataset import ImageDataset
from privbench.errors import AttackNotApplicableError
from privbench.fl.trainer import LocalSGD
from privbench.payloads import LocalTraining, Payload


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
