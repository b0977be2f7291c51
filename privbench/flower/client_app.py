"""privbench's ClientApp: a client's side of a task (the protocol's own ``serve``); what it sends goes back in the reply."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from omegaconf import DictConfig, OmegaConf

from privbench.audit.plan import Plan, plan, prepare
from privbench.errors import ConfigError
from privbench.fl.engine import ClientSide, ClientTask
from privbench.fl.sgd import parameters_of
from privbench.fl.wire import Outbox
from privbench.flower.codec import REPORT, TASK, payloads_in, put_payloads, task
from privbench.flower.engine import ENVELOPE
from privbench.flower.secagg import asked, fitres_reply, secagg_when_asked
from privbench.overrides import check_received_targets

app = ClientApp(mods=[secagg_when_asked])
#: Module prefixes (comma-separated) beyond privbench's own that this node lets a received config instantiate.
ALLOW_ENV = "PRIVBENCH_ALLOW_TARGETS"


@dataclass
class ClientSession:
    """What a ClientApp builds once per run config: the plan and the client side it serves tasks on."""

    plan: Plan
    side: ClientSide

    @classmethod
    def build(cls, config: str) -> "ClientSession":
        cfg = OmegaConf.create(config)
        if not isinstance(cfg, DictConfig):
            raise ConfigError("the received config is not a mapping")
        # a server may send anything: this node instantiates only privbench's own targets (or the operator's)
        check_received_targets(cfg, allow=[t for t in os.environ.get(ALLOW_ENV, "").split(",") if t])
        cfg.metrics.lpips = False  # the attack runs on the server, not here
        p = plan(cfg)
        data, model, _ = prepare(p)
        outbox = Outbox(sends=p.protocol.sends, trainer=p.protocol.trainer, transform=p.transform)
        side = ClientSide(model, data, None, outbox, p.seed, p.victim, parameters_of(model))
        side.state = p.protocol.remote_state(side)
        return cls(p, side)


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
    """Say which client this node holds (its ``partition-id``)."""
    return Message(RecordDict({TASK: ConfigRecord({"partition": int(context.node_config["partition-id"])})}),
                   reply_to=message)


@app.train()
def train(message: Message, context: Context) -> Message:
    """Serve the task the message names, with the protocol's own client code, and reply with what was sent."""
    fields = task(message.content)
    s = session(str(fields["config"]))
    request = ClientTask(str(fields["task"]), int(fields["client"]), int(fields["round"]),
                         tuple(payloads_in(message.content)),
                         {k: v for k, v in fields.items() if k not in ENVELOPE}, agnostic=bool(fields["agnostic"]))
    partition = request.client + (s.side.data.num_clients if request.agnostic else 0)
    held = int(context.node_config["partition-id"])
    if partition != held:
        raise ValueError(f"this node holds partition {held}, not {partition} ({request.task} of {request.name})")
    protocol = s.plan.protocol
    outbox = Outbox(sends=protocol.sends, trainer=protocol.trainer, transform=s.plan.transform)
    s.side.wire = protocol.aggregation.node_wire(outbox)  # local DP-FedAvg: clipped and noised here, as in process
    for down in request.downloads:
        assert down.tensors is not None
        outbox.received(down.receiver, down.tensors)
    protocol.trainer.take_report(request.name)  # what this process read before was reported with its replies
    reply, = protocol.serve(request.task, [request], s.side)
    if asked(message):  # a SecAgg+ round: Flower's mod masks the upload; nothing else leaves the node
        np.random.seed(int(np.random.SeedSequence([s.plan.seed, request.round, request.client, 131])
                           .generate_state(1)[0]))  # the mod's stochastic rounding, fixed by the run
        state = s.side.model.state_dict()
        return Message(fitres_reply(reply, [n for n, t in state.items() if t.is_floating_point()],
                                    uniform=protocol.aggregation.secure_sum().uniform), reply_to=message)
    out: dict[str, Any] = {**reply.fields, REPORT: protocol.trainer.take_report(request.name)}
    if reply.payload is not None:
        out["payload"] = next(i for i, p in enumerate(outbox.sent) if p is reply.payload)
    content = RecordDict({TASK: ConfigRecord(out)})
    put_payloads(content, outbox.sent)
    return Message(content, reply_to=message)
