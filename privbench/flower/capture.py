"""Capture at the server's grid: every message to or from a ClientApp is recorded where it passes."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from flwr.app import Message
from flwr.serverapp import Grid

from privbench.errors import PrivbenchError
from privbench.fl.wire import Wire
from privbench.flower.codec import payloads_in
from privbench.payloads import Payload

#: Seconds to wait for a batch of replies before the run fails (a deployment's clients train on their own time).
REPLY_TIMEOUT_S = 1800.0
#: Checks the ``i``-th reply (the message it answers, the reply, its decoded payloads) before anything is recorded.
ReplyCheck = Callable[[int, Message, Message, Sequence[Payload]], None]


class FlowerClientError(PrivbenchError):
    """A ClientApp failed, or did not answer in time."""


class CapturingGrid:
    """Wraps a Flower ``Grid``: records the payloads of every message sent and every reply received.

    The server-side protocol never records a message itself on Flower; what the attacks read
    is what crossed Flower's transport, decoded from the messages.

    Args:
        grid: the ServerApp's grid (simulation or deployment).
        wire: the run's wire (its store, capture policy and byte tallies).
        timeout: seconds to wait for a batch of replies.
    """

    def __init__(self, grid: Grid, wire: Wire, *, timeout: float | None = REPLY_TIMEOUT_S) -> None:
        self.grid, self.wire, self.timeout = grid, wire, timeout
        self.messages = 0

    def node_ids(self) -> list[int]:
        """The SuperNodes connected now."""
        return sorted(int(n) for n in self.grid.get_node_ids())

    def send_and_receive(self, messages: Iterable[Message], *, check: ReplyCheck | None = None) -> list[Message]:
        """Send ``messages`` and return one reply per message (in their order), recording both sides' payloads.

        Every reply is decoded and, with ``check``, validated before any of them is recorded: a hostile or
        broken reply ends the exchange with one error and leaves nothing of it in the store.
        """
        messages = list(messages)
        for message in messages:
            for payload in payloads_in(message.content):
                self.wire.capture(payload)
        replies = list(self.grid.send_and_receive(messages, timeout=self.timeout))
        # replies arrive as clients finish; record them in the order of the messages, so a run's store is the same
        order = {int(m.metadata.dst_node_id): i for i, m in enumerate(messages)}
        replies.sort(key=lambda r: order.get(int(r.metadata.src_node_id), len(order)))
        if len(replies) != len(messages):
            raise FlowerClientError(f"{len(messages) - len(replies)} of {len(messages)} ClientApps did not reply "
                                    f"within {self.timeout} s")
        decoded = []
        for i, reply in enumerate(replies):
            if reply.has_error():
                raise FlowerClientError(f"a ClientApp (node {reply.metadata.src_node_id}) failed: "
                                        f"{reply.error.reason}")
            try:
                payloads = payloads_in(reply.content)
            except (ValueError, KeyError, TypeError) as exc:
                raise FlowerClientError(f"node {reply.metadata.src_node_id} sent a malformed reply: {exc}") from None
            asked = int(messages[i].metadata.dst_node_id)
            if int(reply.metadata.src_node_id) != asked:
                raise FlowerClientError(f"a reply came from node {reply.metadata.src_node_id}, which was not asked "
                                        f"(node {asked} was)")
            if check is not None:
                check(i, messages[i], reply, payloads)
            decoded.append(payloads)
        for payloads in decoded:
            for payload in payloads:
                self.wire.capture(payload)
        self.messages += len(messages) + len(replies)
        return replies
