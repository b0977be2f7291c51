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
from privbench.fl.protocols.base import ClientRound, ClientStart
from privbench.fl.protocols.clustered import ClusteredProtocol
from privbench.fl.sgd import parameters_of
from privbench.fl.wire import Outbox
from privbench.flower.codec import TASK, payloads_in, put_payloads, task

app = ClientApp()


@dataclass
class ClientSession:
    """What a ClientApp builds once per run config: the plan, the data, the model, the protocol's client state."""

    plan: Any
    data: FederatedData
    model: nn.Module
    state: Any

    @classmethod
    def build(cls, config: str) -> "ClientSession":
        from privbench.audit.run import plan, prepare

        cfg = OmegaConf.create(config)
        assert isinstance(cfg, DictConfig)
        cfg.metrics.lpips = False  # the attack runs on the server, not here
        p = plan(cfg)
        data, model, _ = prepare(p)
        protocol = p.protocol
        state = None
        if isinstance(protocol, ClusteredProtocol):
            state = protocol.start(model, np.zeros(data.num_clients, dtype=int), parameters_of(model))
        return cls(p, data, model, state)


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
    """Send the subspace, or run a round: audit gradient (victim), local training, upload."""
    fields = task(message.content)
    client = int(fields["client"])
    held = int(context.node_config["partition-id"])
    if client != held:
        raise ValueError(f"this node holds client {held}'s data, not client {client}'s")
    s = session(str(fields["config"]))
    protocol, seed = s.plan.protocol, s.plan.seed
    outbox = Outbox(sends=protocol.sends, trainer=protocol.trainer, transform=s.plan.transform)
    reply: dict[str, Any] = {}
    if fields["task"] == "subspace":
        protocol.send_subspace(s.data, client, outbox, seed=seed)
    elif fields["task"] == "round":
        received = payloads_in(message.content)
        state: dict[str, torch.Tensor] = {}
        for down in received:
            assert down.tensors is not None
            state.update(down.tensors)
            outbox.received(down.receiver, down.tensors)
        cluster = int(fields["cluster"])
        at = ClientRound(client, int(fields["round"]), seed, s.plan.victim, outbox,
                         cluster=None if cluster < 0 else cluster)
        pending = protocol.begin_round(s.model, ClientStart(at, state, received[-1].id), s.data, s.state)
        training = protocol.train_clients([pending.job])[0]
        upload = protocol.end_round(pending, training, s.state)
        reply = {"num_samples": upload.num_samples, "layers": json.dumps(upload.layers),
                 "upload": len(outbox.sent) - 1}
    else:
        raise ValueError(f"unknown task {fields['task']!r}")
    content = RecordDict({TASK: ConfigRecord(reply)})
    put_payloads(content, outbox.sent)
    return Message(content, reply_to=message)
