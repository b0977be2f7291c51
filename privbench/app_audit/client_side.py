"""The audit's side of each ClientApp: the app's ClientApp runs as it is, inside a wrapper that notes which records
its data loaders yielded (the evaluator's truth: what it trained and evaluated on) and the DP-SGD its Opacus engines
ran. None of it goes into the reply: the reply is the app's, byte for byte; the notes go to a folder only the
evaluator reads."""
from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from torch.utils.data import DataLoader

#: Most records noted per message (inputs kept as float32; a client's share of a quickstart's data fits).
MAX_RECORDS = 4096


def batch_records(batch: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The inputs and integer labels of one batch as a data loader yields it (a tuple, a list or a dict), or None
    when it has no floating input of at least two dimensions with one integer label per row."""
    values = list(batch.values()) if isinstance(batch, dict) else list(batch) if isinstance(batch, (list, tuple)) else []
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    inputs = next((t for t in tensors if t.is_floating_point() and t.ndim >= 2), None)
    if inputs is None:
        return None
    labels = next((t for t in tensors if not t.is_floating_point() and t.ndim == 1 and len(t) == len(inputs)), None)
    return (inputs, labels) if labels is not None else None


@contextlib.contextmanager
def noting_loaders() -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Within the block, every batch any ``DataLoader`` yields is noted (inputs and labels, detached copies)."""
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    original = DataLoader.__iter__

    def __iter__(self: DataLoader) -> Iterator[Any]:  # noqa: N807 (the method it stands in for)
        for batch in original(self):
            pair = batch_records(batch)
            if pair is not None and sum(len(x) for x, _ in seen) < MAX_RECORDS:
                seen.append((pair[0].detach().cpu().clone().float(), pair[1].detach().cpu().clone().long()))
            yield batch

    DataLoader.__iter__ = __iter__  # type: ignore[method-assign,assignment]
    try:
        yield seen
    finally:
        DataLoader.__iter__ = original  # type: ignore[method-assign]


@contextlib.contextmanager
def noting_dp_sgd() -> Iterator[list[dict[str, Any]]]:
    """Within the block, each Opacus ``PrivacyEngine.make_private*`` call is noted; at its end, each engine's
    accountant history (noise multiplier, sample rate, steps) and the clip it was given."""
    notes: list[dict[str, Any]] = []
    opacus = sys.modules.get("opacus")
    if opacus is None:
        yield notes
        return
    engine_cls = opacus.PrivacyEngine
    originals = {name: getattr(engine_cls, name) for name in ("make_private", "make_private_with_epsilon")}
    engines: list[tuple[Any, dict[str, Any]]] = []

    def wrap(name: str) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            engines.append((self, {"call": name, "max_grad_norm": kwargs.get("max_grad_norm"),
                                   "target_epsilon": kwargs.get("target_epsilon"),
                                   "target_delta": kwargs.get("target_delta"),
                                   "poisson_sampling": kwargs.get("poisson_sampling", True)}))
            return originals[name](self, *args, **kwargs)
        return call

    for name in originals:
        setattr(engine_cls, name, wrap(name))
    try:
        yield notes
    finally:
        for name, fn in originals.items():
            setattr(engine_cls, name, fn)
        for engine, given in engines:
            history = [(float(z), float(q), int(n)) for z, q, n in getattr(engine.accountant, "history", [])]
            notes.append({**given, "accountant": engine.accountant.mechanism(), "history": history})


class AuditedClientApp(ClientApp):
    """The app's ClientApp, called as it is; what its loaders yielded and its DP-SGD did are written to ``notes``
    (one file per message, written whole or not at all)."""

    def __init__(self, app: ClientApp, notes: str) -> None:
        super().__init__()
        self.app, self.notes = app, notes

    def __call__(self, message: Message, context: Context) -> Message:
        with noting_loaders() as seen, noting_dp_sgd() as dp_sgd:
            reply = self.app(message, context)
        inputs = torch.cat([x for x, _ in seen])[:MAX_RECORDS] if seen else torch.empty(0)
        labels = torch.cat([y for _, y in seen])[:MAX_RECORDS] if seen else torch.empty(0, dtype=torch.long)
        note = {"node": int(context.node_id), "partition": int(context.node_config.get("partition-id", -1)),
                "type": message.metadata.message_type, "group": message.metadata.group_id,
                "message_id": message.metadata.message_id, "inputs": inputs, "labels": labels,
                "batches": [len(y) for _, y in seen], "dp_sgd": dp_sgd}
        folder = Path(self.notes)
        name = f"{note['node']}-{note['type']}-{note['group'] or 'x'}-{uuid.uuid4().hex[:12]}"
        tmp = folder / f".{name}.tmp"
        torch.save(note, tmp)
        tmp.replace(folder / f"{name}.pt")
        return reply
