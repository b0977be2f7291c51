"""The recorded traffic written as privbench writes its own runs': ``messages.jsonl`` (every message both ways, no
tensors) and a payload store of the train exchanges (the model each client received and its upload), plus the bytes
by direction and message type."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from privbench.app_audit.simulation import AppRun
from privbench.app_audit.training import as_model
from privbench.io import atomic_write_text
from privbench.payloads import Payload, PayloadStore

ORDER = {"down": 0, "up": 1}


def ordered(run: AppRun) -> list[Any]:
    """The messages in round, direction, type and client order (replies arrive as clients finish; the record does
    not depend on it)."""
    return sorted(run.messages, key=lambda m: (m.round, m.message_type, ORDER[m.direction],
                                               run.partitions.get(m.node, m.node)))


def write_wire(run: AppRun, out: Path, reply_kind: str = "auto") -> dict[str, Any]:
    """Write ``messages.jsonl`` and ``payloads/``; return the byte tallies. Under ``reply_kind=delta`` an upload is
    stored as the model it stands for (the model received plus the delta sent), as privbench's ``update`` is."""
    down = {m.message_id: m for m in run.messages if m.direction == "down" and m.kind == "train"}
    rows: list[str] = []
    tally: defaultdict[str, dict[str, int]] = defaultdict(lambda: {"messages": 0, "wire_bytes": 0, "array_bytes": 0})
    store = PayloadStore(out / "payloads")
    for m in ordered(run):
        client = f"client{run.partitions.get(m.node, m.node)}"
        row = {**m.row(), "client": client}
        del row["node"]  # Flower draws node ids at random; the client is the node's partition
        rows.append(json.dumps(row, sort_keys=True))
        t = tally[f"{m.direction} {m.message_type}"]
        t["messages"] += 1
        t["wire_bytes"] += m.wire_bytes
        t["array_bytes"] += m.array_bytes
        if m.arrays and m.kind == "train":
            sender, receiver = ("server", client) if m.direction == "down" else (client, "server")
            kind = "global_model" if m.direction == "down" else "update"
            base = f"r{m.round:04d}-global_model-server-{client}" if m.direction == "up" else None
            tensors = m.arrays
            if m.direction == "up" and reply_kind == "delta" and m.message_id in down:
                tensors = as_model(down[m.message_id].arrays, m.arrays, "delta")[0]
            store.add(Payload.from_tensors(kind=kind, round=m.round, sender=sender, receiver=receiver,
                                           tensors=tensors, base=base), keep=True)
    store.flush()
    atomic_write_text(out / "messages.jsonl", "\n".join(rows) + "\n")
    return dict(sorted(tally.items()))
