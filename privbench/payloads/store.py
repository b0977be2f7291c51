"""The payload store of a run: one safetensors file per kept message, a JSON index, and their sha256s; the index
and the ground-truth table are signed with the results folder's key (``privbench.payloads.signing``)."""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, save_file

from privbench.errors import StoreError
from privbench.io import atomic_write_text, umask
from privbench.payloads.payload import Payload, tensor_bytes
from privbench.payloads.records import check_records
from privbench.payloads.signing import SIGNATURE, check_signature, find_key, read_key, signature, store_key
from privbench.regular import INDEX_BYTES, RefusedFile, read_hashed

INDEX = "index.json"
#: The index's own sha256, written beside it: an edited index is refused.
INDEX_SHA256 = "index.json.sha256"
#: The evaluator's ground truth: per payload id, the train-set indices it was computed from (never in a message).
TRUTH = "truth.json"
TRUTH_SHA256 = "truth.json.sha256"
#: Bytes a kept payload's file may hold beyond its tensors' (its safetensors header), and per tensor name.
HEADER_BYTES, HEADER_BYTES_PER_NAME = 2**16, 2**10
#: Payload ids name files inside the store: letters, digits, ``_``, ``-`` and inner dots only.
SAFE_ID = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}$")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class PayloadStore:
    """Records every payload's metadata and the tensors of those it is told to keep.

    Example:
        >>> store = PayloadStore(tmp_path / "payloads")            # doctest: +SKIP
        >>> store.add(payload, keep=True); store.flush()           # doctest: +SKIP
        >>> PayloadStore.open(tmp_path / "payloads").load(payload.id)  # doctest: +SKIP
    """

    def __init__(self, root: Path, *, key: bytes | None = None) -> None:
        """A new store at ``root``, its index signed with ``key`` (default: ``signing.store_key(root)``)."""
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._key = key
        self._records: dict[str, dict[str, Any]] = {}
        self._truth: dict[str, list[int]] = {}
        self._cache: dict[str, Payload] = {}

    @classmethod
    def open(cls, root: Path, *, trusted: bool = False, key: bytes | None = None) -> "PayloadStore":
        """Open an existing store: read its index after checking the index's sha256, its signature under the key
        above it (``signing.find_key``, unless ``key`` is given), every record's form and every id.

        A store without its integrity records (the index's sha256 and signature, a kept payload's sha256) is
        refused unless ``trusted`` (the user vouches for where it came from); a trusted store's signature is not
        checked, and every payload's tensors are still checked when loaded.

        Raises:
            StoreError: no index, a missing or mismatched sha256 or signature, a malformed record, an unsafe id.
        """
        root = Path(root)
        index = root / INDEX
        if not index.is_file():
            raise StoreError(f"{index} not found: not a payload store")
        if not trusted and not (root / INDEX_SHA256).is_file():
            raise StoreError(f"{root}: {INDEX_SHA256} is missing, so the index cannot be checked; open it as trusted "
                             "only if you know where it came from (python -m privbench.attack --trusted-store)")
        raw = _verified(index, root / INDEX_SHA256)
        truth = root / TRUTH
        raw_truth = _verified(truth, root / TRUTH_SHA256) if truth.exists() else b""
        if not trusted:
            found = find_key(root) if key is None else None
            signed = _read(root / SIGNATURE, 1024)[0] if (root / SIGNATURE).exists() else None
            check_signature(root, raw, raw_truth, signed, key if key is not None else
                            (read_key(found) if found is not None else None))
        try:
            records = json.loads(raw)
        except ValueError:
            raise StoreError(f"{index} is not a payload index (not JSON)") from None
        ids = check_records(records, index)
        for payload_id in ids:
            _check_id(payload_id)
        unsigned = [r["id"] for r in records if r.get("stored") and "sha256" not in r]
        if unsigned and not trusted:
            raise StoreError(f"{root}: payload {unsigned[0]} has no sha256 in the index; open the store as trusted only "
                             "if you know where it came from")
        store = cls(root)
        store._records = dict(zip(ids, records))
        if raw_truth:
            try:
                table = json.loads(raw_truth)
                store._truth = {str(k): [int(i) for i in v] for k, v in table.items()}
            except (ValueError, TypeError, AttributeError):
                raise StoreError(f"{truth} is not a ground-truth table") from None
        return store

    def add(self, payload: Payload, *, keep: bool, truth: Sequence[int] = ()) -> None:
        """Record ``payload``; write its tensors only when ``keep``; keep ``truth`` (the evaluator's) aside."""
        if payload.id in self._records:
            raise ValueError(f"payload {payload.id} recorded twice")
        _check_id(payload.id)
        try:
            payload.check_bytes()
        except ValueError as exc:
            raise StoreError(str(exc)) from None
        record = payload.record()
        if keep and payload.tensors is not None:
            tmp = self.root / f".{payload.id}.tmp"
            save_file(payload.tensors, str(tmp), metadata={"kind": payload.kind})
            os.chmod(tmp, 0o666 & ~umask())  # safetensors writes 0600; results get the umask's mode
            record["sha256"] = _sha256(tmp.read_bytes())
            tmp.replace(self.root / f"{payload.id}.safetensors")
            self._cache[payload.id] = payload
        record["stored"] = keep and payload.tensors is not None
        self._records[payload.id] = record
        self._truth[payload.id] = [int(i) for i in truth]

    def truth(self, payload_id: str) -> list[int]:
        """The train-set indices ``payload_id`` was computed from (the evaluator's ground truth; empty: none)."""
        return list(self._truth.get(payload_id, []))

    def flush(self) -> None:
        """Write the index, the ground-truth table and their sha256s atomically."""
        truth = json.dumps(self._truth)
        atomic_write_text(self.root / TRUTH, truth)
        atomic_write_text(self.root / TRUTH_SHA256, _sha256(truth.encode()) + "\n")
        text = json.dumps(list(self._records.values()), indent=1)
        atomic_write_text(self.root / INDEX, text)
        atomic_write_text(self.root / INDEX_SHA256, _sha256(text.encode()) + "\n")
        if self._key is None:
            self._key = store_key(self.root)
        atomic_write_text(self.root / SIGNATURE, signature(self._key, text.encode(), truth.encode()) + "\n")

    def records(self, **match: Any) -> Iterator[dict[str, Any]]:
        """Metadata of every recorded payload whose fields equal ``match``."""
        for record in self._records.values():
            if all(record.get(k) == v for k, v in match.items()):
                yield record

    def load(self, payload_id: str) -> Payload:
        """The payload ``payload_id`` with its tensors; fails if they were not kept."""
        if payload_id in self._cache:
            return self._cache[payload_id]
        _check_id(payload_id)
        if payload_id not in self._records:
            raise StoreError(f"payload {payload_id!r} is not in the store {self.root}")
        record = self._records[payload_id]
        if not record["stored"]:
            raise StoreError(f"payload {payload_id} was counted but its tensors were not kept (see capture policy)")
        path = self.root / f"{payload_id}.safetensors"
        # a regular file inside the store, read up to its tensors' bytes and a header, hashed while it is read
        limit = int(record["nbytes"]) + HEADER_BYTES + HEADER_BYTES_PER_NAME * len(record["names"])
        raw, digest = _read(path, limit, root=self.root)
        if "sha256" in record and digest != record["sha256"]:
            raise StoreError(f"{path} is damaged or was changed: its sha256 does not match the index")
        try:
            tensors = load(raw)
        except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types on a damaged file
            raise StoreError(f"{path}: not a safetensors file ({str(exc).splitlines()[0][:120]})") from None
        _check_record(record, tensors, path)
        payload = Payload.from_record(record, tensors={n: tensors[n] for n in record["names"]})
        self._cache[payload_id] = payload
        return payload


def _read(path: Path, limit: int, *, root: Path | None = None) -> tuple[bytes, str]:
    """``path``'s bytes and sha256 (``privbench.regular.read_hashed``); any refusal is a ``StoreError``."""
    try:
        return read_hashed(path, limit, root=root)
    except RefusedFile as exc:
        raise StoreError(str(exc)) from None
    except OSError as exc:
        raise StoreError(f"{path} cannot be read ({exc.strerror or exc})") from None


def _verified(path: Path, digest: Path) -> bytes:
    """``path``'s bytes, refused when its recorded sha256 (``digest``, if present) does not match them."""
    raw, sha256 = _read(path, INDEX_BYTES, root=path.parent)
    if digest.exists() and _read(digest, 1024, root=path.parent)[0].decode("ascii", "replace").strip() != sha256:
        raise StoreError(f"{path} was changed after it was written (its sha256 does not match {digest.name})")
    return raw


def _check_id(payload_id: str) -> None:
    """Refuse ids that could name a file outside the store (``../x``, ``/etc/x``, ``a/b``)."""
    if not SAFE_ID.match(payload_id) or ".." in payload_id:
        raise StoreError(f"payload id {payload_id[:80]!r} is not allowed: ids are letters, digits, '_', '-' and "
                         f"single dots, and never name a path")


def _check_record(record: dict[str, Any], tensors: dict[str, Any], path: Path) -> None:
    """The index entry must describe the file's tensors: names, shapes, dtypes and byte count."""
    names = list(record.get("names", []))
    missing = [n for n in names if n not in tensors]
    if missing:
        raise StoreError(f"{path}: the index names {missing[0]!r}, which the file does not hold")
    for n in names:
        shape, dtype = list(tensors[n].shape), str(tensors[n].dtype).removeprefix("torch.")
        if record.get("shapes", {}).get(n) != shape or record.get("dtypes", {}).get(n) != dtype:
            raise StoreError(f"{path}: the index says {n} is {record.get('dtypes', {}).get(n)} "
                             f"{record.get('shapes', {}).get(n)}, the file holds {dtype} {shape}")
    if record.get("nbytes") != tensor_bytes({n: tensors[n] for n in names}):
        raise StoreError(f"{path}: the index's byte count {record.get('nbytes')} does not match the tensors")
    for n in names:  # checked for every store, trusted or not: a NaN message is no message
        if tensors[n].is_floating_point() and not bool(torch.isfinite(tensors[n]).all()):
            raise StoreError(f"{path}: {n} holds NaN or infinite values")
