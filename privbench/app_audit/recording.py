"""The app's traffic, recorded at its ServerApp's grid: every message both ways, with its bytes, round, sender and
receiver; the arrays of its train messages are kept for the attacks."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.serde import recorddict_to_proto
from flwr.serverapp import Grid


@dataclass
class Sent:
    """One message as it crossed the grid.

    Attributes:
        direction: ``down`` (ServerApp to a ClientApp) or ``up`` (a reply).
        message_type: Flower's type (``train``, ``evaluate``, ``query``, ...).
        round: the strategy's group id when it is a round number (Flower's strategies send ``str(server_round)``),
            else the count of ``message_type`` batches sent so far.
        node: the SuperNode it went to or came from.
        wire_bytes: the size of the message's content as Flower serialises it (``recorddict_to_proto``; the
            metadata's few dozen bytes, which hold Flower's random node and message ids, are left out).
        array_bytes: the bytes of its arrays alone.
        arrays: the named tensors of its ``ArrayRecord``s (train messages only; ``{}`` otherwise).
        config: its ``ConfigRecord`` values; metrics: its ``MetricRecord`` values.
        error: a reply's error reason ("" when it has none).
        message_id: the id of the message sent (for a reply, of the message it answers).
    """

    direction: str
    message_type: str
    round: int
    node: int
    wire_bytes: int
    array_bytes: int
    arrays: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    message_id: str = ""

    @property
    def kind(self) -> str:
        """The message type's category (``train`` for ``train.finetune``)."""
        return self.message_type.split(".")[0]

    def row(self) -> dict[str, Any]:
        """The message's line in ``messages.jsonl`` (no tensors)."""
        return {"direction": self.direction, "type": self.message_type, "round": self.round, "node": self.node,
                "wire_bytes": self.wire_bytes, "array_bytes": self.array_bytes,
                "arrays": {n: list(t.shape) for n, t in self.arrays.items()},
                "config": self.config, "metrics": self.metrics, **({"error": self.error} if self.error else {})}


def _values_of(array: Any) -> np.ndarray:
    """An ``Array``'s values; a legacy ``Parameters`` tensor (no dtype or shape recorded) from its numpy bytes."""
    if array.dtype:
        return array.numpy()
    from flwr.common import bytes_to_ndarray

    return bytes_to_ndarray(array.data)


def _values(record: Any) -> dict[str, Any]:
    return {k: (v if isinstance(v, (bool, int, float, str)) else repr(v)[:80]) for k, v in record.items()}


def _reason(text: str) -> str:
    """A ClientApp's error in one line: the exception's own message where Flower's wrapping quotes it."""
    if "Message:" in text:
        text = text.rsplit("Message:", 1)[1]
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "no reason given")
    return line.strip("'>\" ")[:200]


def stated_round(message: Any) -> int | None:
    """The round a message states: its config's ``server-round`` (Flower's strategies send it), else a numeric group
    id; None when it states none."""
    config = next((r for r in message.content.values() if isinstance(r, ConfigRecord)), None)
    stated = config.get("server-round") if config is not None else None
    if isinstance(stated, int) and not isinstance(stated, bool):
        return stated
    group = message.metadata.group_id
    return int(group) if group.isdigit() else None


def arrays_of(message: Message, *, keep: bool) -> tuple[dict[str, torch.Tensor], int]:
    """The named tensors of ``message``'s ``ArrayRecord``s (``{}`` unless ``keep``) and their bytes; with several
    records each name goes under its record's (no record's tensor hides another's)."""
    arrays: dict[str, torch.Tensor] = {}
    array_bytes = 0
    several = sum(isinstance(r, ArrayRecord) for r in message.content.values()) > 1
    for key, record in message.content.items():
        if not isinstance(record, ArrayRecord):
            continue
        for name, array in record.items():
            if not array.data:  # a legacy reply without parameters carries one empty placeholder
                continue
            values = _values_of(array)
            array_bytes += int(values.nbytes)
            if keep:
                arrays[f"{key}/{name}" if several else name] = torch.from_numpy(values.copy())
    return arrays, array_bytes


def sent(message: Message, direction: str, round_: int, *, keep_arrays: bool, message_id: str | None = None) -> Sent:
    """What ``message`` carried, measured."""
    meta = message.metadata
    node = int(meta.dst_node_id if direction == "down" else meta.src_node_id)
    if message_id is None:
        message_id = meta.message_id if direction == "down" else meta.reply_to_message_id
    if message.has_error():
        return Sent(direction, message.metadata.message_type, round_, node, 0, 0,
                    error=_reason(str(message.error.reason)), message_id=message_id)
    arrays, array_bytes = arrays_of(message, keep=keep_arrays)
    config: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    for record in message.content.values():
        if isinstance(record, ConfigRecord):
            config.update(_values(record))
        elif isinstance(record, MetricRecord):
            metrics.update(_values(record))
    return Sent(direction, message.metadata.message_type, round_, node, recorddict_to_proto(message.content).ByteSize(),
                array_bytes, arrays, config, metrics, message_id=message_id)


@dataclass
class Broadcast:
    """The model one batch sent down carried (what a participation attacker reads).

    Attributes:
        message_type: the batch's type; round: its round.
        arrays: the first message's arrays that carried any.
        message_ids: the ids of the batch's messages that carried arrays.
        same: whether every one of them carried these arrays exactly (False: per-client models).
    """

    message_type: str
    round: int
    arrays: dict[str, torch.Tensor] = field(repr=False)
    message_ids: list[str]
    same: bool


def broadcast(messages: list[Message], recorded: list[Sent]) -> Broadcast | None:
    """The model a batch of ``messages`` (recorded as ``recorded``, in order) carried, or None when none did."""
    carrying = [i for i, m in enumerate(messages) if any(isinstance(r, ArrayRecord) for r in m.content.values())]
    if not carrying:
        return None
    each = [recorded[i].arrays or arrays_of(messages[i], keep=True)[0] for i in carrying]  # no second serialising
    first = each[0]
    same = all(a.keys() == first.keys() and all(torch.equal(a[n], first[n]) for n in first) for a in each[1:])
    head = recorded[carrying[0]]
    return Broadcast(head.message_type, head.round, first, [recorded[i].message_id for i in carrying], same)


class RecordingGrid(Grid):
    """The app's grid, wrapped: messages pass unchanged, and each is measured on its way (``Sent``).

    The ServerApp gets this grid in place of its own; every method forwards to the grid Flower gave it, and a
    batch's wait for replies is capped at ``reply_timeout`` seconds. ``before_train`` is called with any batch that
    holds a train message, and the round it is filed under, before it leaves (the audit plans its canary clients
    there, and reads an adaptive clip).
    """

    def __init__(self, grid: Grid, *, reply_timeout: float = 300.0,
                 before_train: Callable[[list[Message], int], None] | None = None) -> None:
        self.grid, self.reply_timeout, self.before_train = grid, reply_timeout, before_train
        self.messages: list[Sent] = []
        self._rounds: dict[str, int] = {}
        self._asked: dict[str, int] = {}  # message id -> round, so a reply is filed under its message's round
        self._last: dict[tuple[int, str], int] = {}  # (node, type) -> the round last sent there
        #: the model each batch sent down carried, in send order
        self.models: list[Broadcast] = []

    def set_run(self, run: Any) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Any:
        return self.grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        return self.grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        return self.grid.get_node_ids()

    def get_nodes(self) -> Iterable[Any]:
        return self.grid.get_nodes()

    def _round(self, message: Message) -> int:
        """The strategy's round: its config's ``server-round`` (Flower's strategies send it, from 1), a numeric group
        id, else the count of batches of this message type sent so far (from 1)."""
        stated = stated_round(message)
        return stated if stated is not None else self._rounds.get(message.metadata.message_type, 0) + 1

    def _down(self, messages: list[Message], ids: list[str] | None = None) -> None:
        kinds = set()
        for i, message in enumerate(messages):
            round_ = self._round(message)
            message_id = ids[i] if ids is not None else message.metadata.message_id
            self.messages.append(sent(message, "down", round_, keep_arrays=message.metadata.message_type.split(".")[0] == "train",
                                      message_id=message_id))
            self._asked[message_id] = round_
            self._last[(int(message.metadata.dst_node_id), message.metadata.message_type)] = round_
            kinds.add(message.metadata.message_type)
        model = broadcast(messages, self.messages[len(self.messages) - len(messages):])
        if model is not None:
            self.models.append(model)
        for kind in kinds:
            self._rounds[kind] = self._rounds.get(kind, 0) + 1

    def unanswered(self) -> list[Sent]:
        """Messages sent that no reply answers."""
        answered = {m.message_id for m in self.messages if m.direction == "up"}
        return [m for m in self.messages if m.direction == "down" and m.message_id not in answered]

    def _up(self, replies: Iterable[Message]) -> list[Message]:
        replies = list(replies)
        for reply in replies:
            round_ = self._asked.get(reply.metadata.reply_to_message_id,
                                     self._last.get((int(reply.metadata.src_node_id), reply.metadata.message_type), -1))
            self.messages.append(sent(reply, "up", round_, keep_arrays=reply.metadata.message_type.split(".")[0] == "train"))
        return replies

    def _about_to_send(self, messages: list[Message]) -> None:
        if self.before_train is not None and any(m.metadata.message_type.startswith("train") for m in messages):
            first = next(m for m in messages if m.metadata.message_type.startswith("train"))
            self.before_train(messages, self._round(first))

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        self._about_to_send(messages)
        ids = list(self.grid.push_messages(messages))
        self._down(messages, ids)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self._up(self.grid.pull_messages(message_ids))

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        self._about_to_send(messages)
        # a ClientApp whose reply Flower rejects never answers: the wait is capped, and the audit says so
        cap = self.reply_timeout if timeout is None else min(timeout, self.reply_timeout)
        replies = list(self.grid.send_and_receive(messages, timeout=cap))
        self._down(messages)  # after sending: Flower stamps each message's id as it pushes it
        # replies arrive as clients finish; the strategy gets them in the order of its messages, so its float sums
        # (FedAvg's mean) and the run are the same each time
        order = {m.metadata.message_id: i for i, m in enumerate(messages)}
        replies.sort(key=lambda r: order.get(r.metadata.reply_to_message_id, len(order)))
        return self._up(replies)
