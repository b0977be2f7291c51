"""The Flower engine: a protocol's server loop talks to ClientApps through a capturing grid."""
from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from torch import nn

from privbench.data import FederatedData
from privbench.fl.engine.base import Engine
from privbench.fl.protocols.base import ClientStart, FederatedProtocol, Upload
from privbench.fl.wire import Outbox, Wire
from privbench.flower.capture import CapturingGrid, FlowerClientError
from privbench.flower.codec import TASK, payloads_in, put_payloads, task

if TYPE_CHECKING:
    from privbench.fl.protocols.clustered import ClusteredProtocol


#: Seconds to wait for every client's SuperNode to connect before the run fails.
NODE_WAIT_S = 60.0


class FlowerEngine(Engine):
    """Runs the clients' side on Flower SuperNodes, one known client per node (its ``partition-id``).

    Each message carries the run's resolved config, so a ClientApp rebuilds the same data,
    model and protocol and needs nothing else. Downloads are prepared in an ``Outbox`` and
    recorded, like the replies, by the ``CapturingGrid`` as they pass.

    Args:
        grid: the capturing grid.
        config: the run's resolved config (YAML).
        num_clients: known clients; nodes with ``partition-id`` 0..num_clients-1 must be connected.
        wait: seconds to wait for the nodes to connect (default ``NODE_WAIT_S``; a deployment's
            SuperNodes may connect late).
    """

    name = "flower"

    def __init__(self, grid: CapturingGrid, *, config: str, num_clients: int, wait: float | None = None) -> None:
        self.grid, self.config = grid, config
        self.nodes = self._find_nodes(num_clients, NODE_WAIT_S if wait is None else wait)
        self._post: Outbox | None = None

    def _find_nodes(self, num_clients: int, wait: float) -> dict[int, int]:
        """Map each known client to the node holding its partition (asked with one query each)."""
        deadline = time.monotonic() + wait
        nodes = self.grid.node_ids()
        while len(nodes) < num_clients and time.monotonic() < deadline:
            time.sleep(0.5)
            nodes = self.grid.node_ids()
        hello = [Message(RecordDict({TASK: ConfigRecord({"task": "hello"})}), n, MessageType.QUERY) for n in nodes]
        held = {int(task(r.content)["partition"]): int(r.metadata.src_node_id)
                for r in self.grid.send_and_receive(hello)}
        missing = [c for c in range(num_clients) if c not in held]
        if missing:
            raise FlowerClientError(f"no SuperNode holds client {missing[0]}: data.num_clients={num_clients} needs one "
                                    f"node per client, started with --node-config 'partition-id=<i> "
                                    f"num-partitions={num_clients}' (connected: partitions {sorted(held)})")
        return held

    def _message(self, client: int, what: str, *, round_: int, payloads: Sequence[Any] = (),
                 **fields: Any) -> Message:
        content = RecordDict({TASK: ConfigRecord({"task": what, "config": self.config, "client": client,
                                                  "round": round_, **fields})})
        put_payloads(content, payloads)
        return Message(content, self.nodes[client], MessageType.TRAIN, group_id=str(round_))

    def _exchange(self, messages: list[Message], clients: list[int]) -> list[Message]:
        """Send and return the replies in the order of ``clients``."""
        by_node = {int(r.metadata.src_node_id): r for r in self.grid.send_and_receive(messages)}
        return [by_node[self.nodes[c]] for c in clients]

    def downlink_wire(self, wire: Wire) -> Wire:
        self._post = Outbox(sends=wire.sends, trainer=wire.trainer)
        return self._post

    def subspaces(self, protocol: "ClusteredProtocol", data: FederatedData, wire: Wire, *,
                  seed: int) -> list[np.ndarray]:
        clients = list(range(data.num_clients))
        replies = self._exchange([self._message(c, "subspace", round_=0) for c in clients], clients)
        return [payloads_in(r.content)[0].tensors["U"].double().numpy() for r in replies]  # type: ignore[index]

    def train_round(self, protocol: FederatedProtocol, *, model: nn.Module, data: FederatedData, state: Any,
                    starts: Sequence[ClientStart]) -> list[Upload]:
        assert self._post is not None, "downloads go through downlink_wire first"
        messages = [self._message(s.at.client, "round", round_=s.at.round, payloads=self._post.take(s.at.name),
                                  cluster=-1 if s.at.cluster is None else s.at.cluster) for s in starts]
        uploads = []
        for reply in self._exchange(messages, [s.at.client for s in starts]):
            fields, sent = task(reply.content), payloads_in(reply.content)
            up = sent[int(fields["upload"])]
            assert up.tensors is not None
            uploads.append(Upload(int(fields["num_samples"]), up.tensors, json.loads(str(fields["layers"]))))
        return uploads
