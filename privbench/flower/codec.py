"""Payloads in Flower messages: each one's tensors as an ArrayRecord, its metadata as a ConfigRecord."""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from privbench.payloads import Payload

#: The ConfigRecord that says what a message asks of a client, or what its reply holds.
TASK = "privbench"
#: The reply field that carries the client's report of its reads and DP accounting (``Trainer.take_report``).
REPORT = "reads_report"


def put_payloads(content: RecordDict, payloads: Sequence[Payload]) -> None:
    """Add ``payloads`` to ``content`` as ``payload.<i>`` (tensors) and ``payload.<i>.meta`` (the rest)."""
    for i, payload in enumerate(payloads):
        assert payload.tensors is not None, f"{payload.id}: a message carries its tensors"
        content[f"payload.{i}"] = ArrayRecord(torch_state_dict={n: t.contiguous() for n, t in payload.tensors.items()})
        content[f"payload.{i}.meta"] = ConfigRecord({"record": json.dumps(payload.record())})


def payloads_in(content: RecordDict) -> list[Payload]:
    """The payloads ``put_payloads`` added, in order, with their tensors.

    Example:
        >>> content = RecordDict()
        >>> put_payloads(content, [Payload.from_tensors(kind="gradient", round=0, sender="client0",
        ...                                             receiver="server", tensors={"w": torch.ones(2)})])
        >>> [(p.id, p.nbytes) for p in payloads_in(content)]
        [('r0000-gradient-client0-server', 8)]
    """
    out = []
    i = 0
    while f"payload.{i}" in content:
        arrays = content.array_records[f"payload.{i}"]
        record = json.loads(str(content.config_records[f"payload.{i}.meta"]["record"]))
        tensors = {name: torch.from_numpy(array.numpy().copy()) for name, array in arrays.items()}
        payload = Payload.from_record(record, tensors)
        if payload.nbytes != sum(t.numel() * t.element_size() for t in tensors.values()):
            raise ValueError(f"{payload.id}: the message's tensors are not the {payload.nbytes} bytes it declares")
        payload.check_bytes()  # names, shapes and dtypes as declared too
        out.append(payload)
        i += 1
    return out


def task(content: RecordDict) -> dict[str, Any]:
    """The ``privbench`` ConfigRecord of a message as a plain dict."""
    return dict(content.config_records[TASK])
