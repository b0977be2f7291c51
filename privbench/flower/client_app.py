"""privbench's ClientApp: a known client's side of a round; what it sends goes back in the reply."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from omegaconf import DictConfig, OmegaConf
from torch import nn

from privbench.data import FederatedData
from privbench.fl.genefl.agnostic import finetuned_accuracy
from privbench.fl.protocols.base import ClientRound, ClientStart, Upload
from privbench.fl.protocols.clustered import ClusteredProtocol
from privbench.fl.sgd import parameters_of
from privbench.fl.wire import Outbox
from privbench.flower.codec import TASK, payloads_in, put_payloads, task
from privbench.payloads import Payload

app = ClientApp()


@dataclass
class ClientSession:
    """What a ClientApp builds once per run config: the plan, the data, the model, the protocol's client state."""

    plan: Any
    data: FederatedData
    model: nn.Module
    state: Any
    theta0: dict[str, torch.Tensor]

    @classmethod
    def build(cls, config: str) -> "ClientSession":
        from privbench.audit.run import plan, prepare

        cfg = OmegaConf.create(config)
        assert isinstance(cfg, DictConfig)
        cfg.metrics.lpips = False  # the attack runs on the server, not here
        p = plan(cfg)
        data, model, _ = prepare(p)
        protocol = p.protocol
        theta0, state = parameters_of(model), None
        if isinstance(protocol, ClusteredProtocol):
            state = protocol.start(model, np.zeros(data.num_clients, dtype=int), theta0)
        return cls(p, data, model, state, theta0)


_SESSIONS: dict[str, ClientSession] = {}


def session(config: str) -> ClientSession:
    """The session of ``config`` (built on the first message of a run, then reused by this process)."""
    key = hashlib.sha256(config.encode()).hexdigest()
    if key not in _SESSIONS:
        threads = os.environ.get("PRIVBENCH_CLIENT_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        _SESSIONS.clear()
        _SESSIONS[key] = ClientSession.build(config)
    return _SESSIONS[key]


@app.query()
def hello(message: Message, context: Context) -> Message:
    """Say which known client this node holds (its ``partition-id``)."""
    return Message(RecordDict({TASK: ConfigRecord({"partition": int(context.node_config["partition-id"])})}),
                   reply_to=message)


@app.train()
def train(message: Message, context: Context) -> Message:
    """Send the subspace, run a round (audit gradient, local training, upload), or join as an agnostic client."""
    fields = task(message.content)
    s = session(str(fields["config"]))
    what, client = str(fields["task"]), int(fields["client"])
    partition = client + (s.data.num_clients if what.startswith("agnostic") else 0)
    held = int(context.node_config["partition-id"])
    if partition != held:
        raise ValueError(f"this node holds partition {held}, not {partition} ({what} of client {client})")
    protocol, seed = s.plan.protocol, s.plan.seed
    outbox = Outbox(sends=protocol.sends, trainer=protocol.trainer, transform=s.plan.transform)
    received = payloads_in(message.content)
    for down in received:
        assert down.tensors is not None
        outbox.received(down.receiver, down.tensors)
    reply: dict[str, Any] = {}
    if what == "subspace":
        protocol.send_subspace(s.data, client, outbox, seed=seed)
    elif what == "round":
        upload = _round(s, client, fields, received, outbox)
        reply = {"num_samples": upload.num_samples, "layers": json.dumps(upload.layers),
                 "upload": len(outbox.sent) - 1}
    elif what == "agnostic_subspace":
        protocol.send_subspace(s.data, client, outbox, seed=seed, agnostic=True, round_=int(fields["round"]))
    elif what == "agnostic_tune":
        gene = received[0].tensors
        assert gene is not None
        reply = {"accuracy": finetuned_accuracy(s.model, {**s.theta0, **gene}, s.data, client, protocol.agnostic,
                                                seed=seed)}
    else:
        raise ValueError(f"unknown task {what!r}")
    content = RecordDict({TASK: ConfigRecord(reply)})
    put_payloads(content, outbox.sent)
    return Message(content, reply_to=message)


def _round(s: ClientSession, client: int, fields: dict[str, Any], received: list[Payload], outbox: Outbox) -> Upload:
    """Client ``client``'s round from what it received: the protocol's own client side."""
    state: dict[str, torch.Tensor] = {}
    for down in received:
        assert down.tensors is not None
        state.update(down.tensors)
    cluster = int(fields["cluster"])
    at = ClientRound(client, int(fields["round"]), s.plan.seed, s.plan.victim, outbox,
                     cluster=None if cluster < 0 else cluster)
    protocol = s.plan.protocol
    pending = protocol.begin_round(s.model, ClientStart(at, state, received[-1].id), s.data, s.state)
    training = protocol.train_clients([pending.job])[0]
    upload: Upload = protocol.end_round(pending, training, s.state)
    return upload
