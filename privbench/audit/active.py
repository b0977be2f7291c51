"""The round an active server crafts: it sends the victim its own download, the victim trains on it as usual.

The federated run stays honest; for the audited round the server (the attack, ``craft``) replaces the download the
victim received, and the victim's round runs again from that download on the same data with the same local
training its recorded reply declares (a one-step gradient, or local SGD epochs), by a fresh copy of the run's own
trainer (DP-SGD included, so its accounting of the real run is untouched) and the wire's message transform. The
attacker gets the crafted download and the reply, never the data. The victim also runs a cautious client's check
of what it received (``defenses.detector``); its verdict is reported, and the victim trains regardless.
"""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from privbench.attacks.views import ActiveView, at_weights
from privbench.audit.plan import Plan
from privbench.data import FederatedData
from privbench.defenses.detector import inspect_download
from privbench.figures import DOWNLOAD_FLAGGED
from privbench.errors import AttackNotApplicableError
from privbench.fl.trainer import SGDTrainer, Trainer
from privbench.audit.rerun import local_sgd, rerun_inputs
from privbench.pixels import normalise
from privbench.payloads import Payload
from privbench.fl.sgd import parameters_of


def _trainer(p: Plan) -> Trainer:
    """A copy of the run's trainer (its planned noise and accounting; the copy's releases never reach the run's
    record), or plain SGD under a message transform."""
    if p.transform is not None:
        return SGDTrainer()
    return copy.deepcopy(p.protocol.trainer)


def active_round(p: Plan, payload: Payload, base: Payload | None, model: nn.Module, data: FederatedData,
                 indices: list[int]) -> ActiveView:
    """Craft the victim's download of ``payload``'s round, rerun its round on it, and return the server's view.

    ``indices`` are the train images the recorded reply was computed from (the evaluator's truth): the victim
    trains on them again, as it did, but from the crafted download.
    """
    if payload.kind not in ("gradient", "update"):
        raise AttackNotApplicableError(f"attack={p.attack.name} crafts the download of a gradient or an update "
                                       f"round; {payload.kind} is not one (a learnGene's layer choice is not rerun)")
    device = next(model.parameters()).device
    received, training, client_data = rerun_inputs(payload, base, data, indices, device=device,
                                                   what="an active round")
    craft = getattr(p.attack, "craft")
    rows = torch.randperm(len(data.test), generator=torch.Generator().manual_seed(p.seed * 7919 + 31))
    rows = rows[: int(getattr(p.attack, "public", 1000))].to(data.test.images.device)
    public = normalise(data.test.images[rows].cpu().float() / 255.0, data.train.mean, data.train.std)
    crafted = craft(at_weights(model, received), public.to(device), seed=p.seed)
    sent = parameters_of(crafted)
    trainer, name = _trainer(p), payload.sender
    generator = torch.Generator().manual_seed(p.seed * 1_000_003 + 71)
    if payload.kind == "gradient":
        x, y = client_data.normalised(), client_data.labels
        reply, record = trainer.gradient(crafted, x, y, client=name, lr=training.lr, generator=generator)
    else:
        local = copy.deepcopy(crafted)
        record = trainer.train(local, client_data, client=name, sgd=local_sgd(training), generator=generator)
        reply = parameters_of(local)
    message = Payload.from_tensors(kind=payload.kind, round=payload.round, sender=name, receiver="server",
                                   tensors=reply, base=f"{payload.base}-crafted", training=record)
    if p.transform is not None:
        message = p.transform.protect(message, sent if payload.kind == "update" else None)
    assert message.tensors is not None
    observed = (dict(message.tensors) if payload.kind == "gradient"
                else {n: t - sent[n] for n, t in message.tensors.items() if n in sent and t.is_floating_point()})
    describe: dict[str, Any] = getattr(p.attack, "describe")()
    knowledge = {"payload": payload.id, "payload_kind": payload.kind, **describe,
                 "crafted_download": f"{payload.base} behind the crafted block ({sum(t.numel() for t in sent.values()):,} "
                                     "elements)",
                 "reply": f"the victim's {payload.kind}, trained as usual on the crafted download "
                          f"({record.steps} step(s), batch {record.batch_size}, {record.num_samples} samples)",
                 "reply_bytes": message.nbytes, "training": record.hyperparameters(), "labels": "not given"}
    verdict = inspect_download(sent, {n: list(t.shape) for n, t in received.items()})
    check = {DOWNLOAD_FLAGGED.key: float(verdict.flagged), "download_check": verdict.reasons}
    return ActiveView(sent, observed, payload.kind, record, data.train.shape, tuple(data.train.mean),
                      tuple(data.train.std), knowledge, check)
