"""The Flower engine: a protocol's server loop talks to ClientApps through a capturing grid."""
from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from omegaconf import OmegaConf
from torch import nn

from privbench.data import FederatedData
from privbench.fl.engine.base import Engine
from privbench.fl.protocols.base import ClientStart, FederatedProtocol, Upload
from privbench.fl.sgd import State
from privbench.fl.wire import Outbox, Wire
from privbench.flower.capture import CapturingGrid, FlowerClientError
from privbench.flower.codec import TASK, payloads_in, put_payloads, task
from privbench.payloads import Payload

if TYPE_CHECKING:
    from privbench.audit.run import Plan
    from privbench.fl.protocols.clustered import ClusteredProtocol


#: Seconds to wait for every client's SuperNode to connect before the run fails.
NODE_WAIT_S = 60.0


class FlowerEngine(Engine):
    """Runs the clients' side on Flower SuperNodes, one client per node (its ``partition-id``).

    Each message carries the run's resolved config, so a ClientApp rebuilds the same data,
    model and protocol and needs nothing else. Downloads are prepared in an ``Outbox`` and
    recorded, like the replies, by the ``CapturingGrid`` as they pass.

    Args:
        grid: the capturing grid.
        config: the run's resolved config (YAML).
        num_clients: known clients; nodes with ``partition-id`` 0..num_clients-1 must be connected.
        num_agnostic: agnostic clients that join after training, on the nodes with
            ``partition-id`` num_clients.. (0 for a protocol without them).
        wait: seconds to wait for the nodes to connect (default ``NODE_WAIT_S``; a deployment's
            SuperNodes may connect late).
    """

    name = "flower"

    def __init__(self, grid: CapturingGrid, *, config: str, num_clients: int, num_agnostic: int = 0,
                 wait: float | None = None) -> None:
        self.grid, self.config, self.num_clients = grid, config, num_clients
        self.nodes = self._find_nodes(num_clients + num_agnostic, NODE_WAIT_S if wait is None else wait)
        self._post: Outbox | None = None

    def _find_nodes(self, num_nodes: int, wait: float) -> dict[int, int]:
        """Map each partition (known clients, then agnostic ones) to the node holding it (one query each)."""
        deadline = time.monotonic() + wait
        nodes = self.grid.node_ids()
        while len(nodes) < num_nodes and time.monotonic() < deadline:
            time.sleep(0.5)
            nodes = self.grid.node_ids()
        hello = [Message(RecordDict({TASK: ConfigRecord({"task": "hello"})}), n, MessageType.QUERY) for n in nodes]
        held = {int(task(r.content)["partition"]): int(r.metadata.src_node_id)
                for r in self.grid.send_and_receive(hello)}
        missing = [c for c in range(num_nodes) if c not in held]
        if missing:
            who = (f"client {missing[0]}" if missing[0] < self.num_clients
                   else f"agnostic client {missing[0] - self.num_clients}")
            raise FlowerClientError(f"no SuperNode holds partition {missing[0]} ({who}): this run needs one node per "
                                    f"client, {self.num_clients} known then {num_nodes - self.num_clients} agnostic, "
                                    f"started with --node-config 'partition-id=<i> num-partitions={num_nodes}' "
                                    f"(connected: partitions {sorted(held)})")
        return held

    def _message(self, partition: int, what: str, *, client: int, round_: int, payloads: Sequence[Any] = (),
                 **fields: Any) -> Message:
        content = RecordDict({TASK: ConfigRecord({"task": what, "config": self.config, "client": client,
                                                  "round": round_, **fields})})
        put_payloads(content, payloads)
        return Message(content, self.nodes[partition], MessageType.TRAIN, group_id=str(round_))

    def _exchange(self, messages: list[Message], partitions: list[int]) -> list[Message]:
        """Send and return the replies in the order of ``partitions``."""
        by_node = {int(r.metadata.src_node_id): r for r in self.grid.send_and_receive(messages)}
        return [by_node[self.nodes[c]] for c in partitions]

    def downlink_wire(self, wire: Wire) -> Wire:
        self._post = Outbox(sends=wire.sends, trainer=wire.trainer)
        return self._post

    def subspaces(self, protocol: "ClusteredProtocol", data: FederatedData, wire: Wire, *,
                  seed: int) -> list[np.ndarray]:
        clients = list(range(data.num_clients))
        replies = self._exchange([self._message(c, "subspace", client=c, round_=0) for c in clients], clients)
        return [payloads_in(r.content)[0].tensors["U"].double().numpy() for r in replies]  # type: ignore[index]

    def agnostic_subspace(self, protocol: "ClusteredProtocol", data: FederatedData, a: int, wire: Wire, *,
                          round_: int, seed: int) -> np.ndarray:
        partition = self.num_clients + a
        reply, = self._exchange([self._message(partition, "agnostic_subspace", client=a, round_=round_)], [partition])
        return payloads_in(reply.content)[0].tensors["U"].double().numpy()  # type: ignore[index]

    def agnostic_finetune(self, protocol: "ClusteredProtocol", *, model: nn.Module, data: FederatedData, a: int,
                          gene: Payload, theta0: State, wire: Wire, seed: int) -> float:
        partition = self.num_clients + a
        message = self._message(partition, "agnostic_tune", client=a, round_=gene.round, payloads=[gene])
        reply, = self._exchange([message], [partition])
        return float(task(reply.content)["accuracy"])

    def train_round(self, protocol: FederatedProtocol, *, model: nn.Module, data: FederatedData, state: Any,
                    starts: Sequence[ClientStart]) -> list[Upload]:
        assert self._post is not None, "downloads go through downlink_wire first"
        messages = [self._message(s.at.client, "round", client=s.at.client, round_=s.at.round,
                                  payloads=self._post.take(s.at.name), cluster=-1 if s.at.cluster is None
                                  else s.at.cluster) for s in starts]
        uploads = []
        for reply in self._exchange(messages, [s.at.client for s in starts]):
            fields, sent = task(reply.content), payloads_in(reply.content)
            up = sent[int(fields["upload"])]
            assert up.tensors is not None
            uploads.append(Upload(int(fields["num_samples"]), up.tensors, json.loads(str(fields["layers"]))))
        return uploads


def agnostic_count(p: "Plan", data: FederatedData) -> int:
    """Agnostic clients that join run ``p`` after training (those of a clustered protocol)."""
    from privbench.fl.protocols.clustered import ClusteredProtocol

    return len(data.agnostic_clients) if isinstance(p.protocol, ClusteredProtocol) else 0


def engine_for(p: "Plan", grid: CapturingGrid, data: FederatedData) -> FlowerEngine:
    """The engine of run ``p``: a node per known client, and per agnostic client when the run has them."""
    return FlowerEngine(grid, config=OmegaConf.to_yaml(p.cfg, resolve=True), num_clients=data.num_clients,
                        num_agnostic=agnostic_count(p, data))
