"""The Flower engine: a protocol's server loop talks to ClientApps through a capturing grid."""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from flwr.app import ConfigRecord, Message, MessageType, RecordDict

from privbench.fl.engine import ClientSide, ClientTask, ClientTasks, Engine, TaskReply
from privbench.fl.wire import Outbox, Wire
from privbench.flower.capture import CapturingGrid, FlowerClientError
from privbench.flower.codec import REPORT, TASK, put_payloads, task
from privbench.payloads import Payload

#: Seconds to wait for every client's SuperNode to connect before the run fails.
NODE_WAIT_S = 60.0
#: Fields of a task message that are not the task's own.
ENVELOPE = ("task", "config", "client", "round", "agnostic")


class FlowerEngine(Engine):
    """Runs client tasks on Flower SuperNodes, one client per node (its ``partition-id``).

    Each request becomes one Flower message with the task's name, its fields, its downloads and
    the run's resolved config, so a ClientApp rebuilds the same data, model and protocol and
    needs nothing else; the ClientApp answers with the protocol's ``serve``. Downloads are
    prepared in an ``Outbox`` and recorded, like the replies, by the ``CapturingGrid`` as they pass.

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
        held: dict[int, int] = {}
        for r in self.grid.send_and_receive(hello):
            partition, node = int(task(r.content)["partition"]), int(r.metadata.src_node_id)
            if partition in held:
                raise FlowerClientError(f"nodes {held[partition]} and {node} both claim partition {partition}: one "
                                        "client per node; refusing to pick one")
            held[partition] = node
        missing = [c for c in range(num_nodes) if c not in held]
        if missing:
            who = (f"client {missing[0]}" if missing[0] < self.num_clients
                   else f"agnostic client {missing[0] - self.num_clients}")
            raise FlowerClientError(f"no SuperNode holds partition {missing[0]} ({who}): this run needs one node per "
                                    f"client, {self.num_clients} known then {num_nodes - self.num_clients} agnostic, "
                                    f"started with --node-config 'partition-id=<i> num-partitions={num_nodes}' "
                                    f"(connected: partitions {sorted(held)})")
        return held

    def _message(self, request: ClientTask) -> Message:
        content = RecordDict({TASK: ConfigRecord({"task": request.task, "config": self.config,
                                                  "client": request.client, "round": request.round,
                                                  "agnostic": request.agnostic, **request.fields})})
        put_payloads(content, request.downloads)
        return Message(content, self.nodes[self.partition(request)], MessageType.TRAIN, group_id=str(request.round))

    def partition(self, request: ClientTask) -> int:
        """The partition that holds ``request``'s client: known clients first, then the agnostic ones."""
        return request.client + (self.num_clients if request.agnostic else 0)

    def downlink_wire(self, wire: Wire) -> Wire:
        self._post = Outbox(sends=wire.sends, trainer=wire.trainer)
        return self._post

    def run(self, protocol: ClientTasks, requests: Sequence[ClientTask], side: ClientSide) -> list[TaskReply]:
        """One message per request; the replies in the order of ``requests``. Under secure aggregation a round runs
        Flower's SecAgg+ per cohort (``privbench.flower.secagg``) and each reply carries its cohort's aggregate."""
        if self._post is not None:
            self._post.sent.clear()  # the downloads travel in the requests' messages
        aggregation = getattr(protocol, "aggregation", None)
        if requests and requests[0].task == "round" and getattr(aggregation, "seals", False):
            from privbench.flower.secagg import secure_round

            state = side.model.state_dict()
            names = [n for n, t in state.items() if t.is_floating_point()]
            messages = [self._message(q) for q in requests]

            def sealed(i: int, fields: dict[str, Any]) -> None:
                try:
                    protocol.check_sealed(requests[i], fields, side)
                except (ValueError, KeyError, TypeError) as exc:
                    raise FlowerClientError(f"{requests[i].name} (node {messages[i].metadata.dst_node_id}) sent a "
                                            f"reply the server refuses: {exc}") from None

            assert aggregation is not None
            try:
                return secure_round(self.grid, self.grid.wire, requests, messages, aggregation=aggregation.secure_sum(),
                                    names=names, base=state, check=sealed)
            except (ValueError, KeyError, TypeError) as exc:
                raise FlowerClientError(f"a secure round's reply was refused: {exc}") from None
        replies: list[TaskReply | None] = [None] * len(requests)

        def check(i: int, message: Message, reply: Message, sent: Sequence[Payload]) -> None:
            q = requests[i]
            try:
                fields = task(reply.content)
                report = fields.pop(REPORT, None)
                index = fields.pop("payload", None)
                if index is not None and not (isinstance(index, int) and 0 <= index < len(sent)):
                    raise ValueError(f"its reply points at payload {index!r} of {len(sent)}")
                answer = TaskReply(fields, None if index is None else sent[int(index)])
                protocol.check_reply(q, answer, sent, side)
                protocol.receive_report(q, None if report is None else str(report), side)
            except (ValueError, KeyError, TypeError) as exc:
                raise FlowerClientError(f"{q.name} (node {reply.metadata.src_node_id}) sent a reply the server "
                                        f"refuses: {exc}") from None
            replies[i] = answer

        self.grid.send_and_receive([self._message(q) for q in requests], check=check)
        return [r for r in replies if r is not None]
