"""The payload store of a run: one safetensors file per kept message plus a JSON index."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file

from privbench.io import atomic_write_text
from privbench.payloads.payload import Payload

INDEX = "index.json"


class PayloadStore:
    """Records every payload's metadata and the tensors of those it is told to keep.

    Example:
        >>> store = PayloadStore(tmp_path / "payloads")            # doctest: +SKIP
        >>> store.add(payload, keep=True); store.flush()           # doctest: +SKIP
        >>> PayloadStore.open(tmp_path / "payloads").load(payload.id)  # doctest: +SKIP
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._records: dict[str, dict[str, Any]] = {}
        self._cache: dict[str, Payload] = {}

    @classmethod
    def open(cls, root: Path) -> "PayloadStore":
        """Open an existing store (reads its index)."""
        store = cls(root)
        index = store.root / INDEX
        if not index.exists():
            raise FileNotFoundError(f"{index} not found: not a payload store")
        for record in json.loads(index.read_text()):
            store._records[record["id"]] = record
        return store

    def add(self, payload: Payload, *, keep: bool) -> None:
        """Record ``payload``; write its tensors only when ``keep``."""
        if payload.id in self._records:
            raise ValueError(f"payload {payload.id} recorded twice")
        if keep and payload.tensors is not None:
            tmp = self.root / f".{payload.id}.tmp"
            save_file(payload.tensors, str(tmp), metadata={"kind": payload.kind})
            tmp.replace(self.root / f"{payload.id}.safetensors")
            self._cache[payload.id] = payload
        record = payload.record()
        record["stored"] = keep and payload.tensors is not None
        self._records[payload.id] = record

    def flush(self) -> None:
        """Write the index atomically."""
        atomic_write_text(self.root / INDEX, json.dumps(list(self._records.values()), indent=1))

    def records(self, **match: Any) -> Iterator[dict[str, Any]]:
        """Metadata of every recorded payload whose fields equal ``match``."""
        for record in self._records.values():
            if all(record.get(k) == v for k, v in match.items()):
                yield record

    def load(self, payload_id: str) -> Payload:
        """The payload ``payload_id`` with its tensors; fails if they were not kept."""
        if payload_id in self._cache:
            return self._cache[payload_id]
        record = self._records[payload_id]
        if not record["stored"]:
            raise KeyError(f"payload {payload_id} was counted but its tensors were not kept (see capture policy)")
        tensors = load_file(str(self.root / f"{payload_id}.safetensors"))
        payload = Payload.from_record(record, tensors={n: tensors[n] for n in record["names"]})
        self._cache[payload_id] = payload
        return payload
