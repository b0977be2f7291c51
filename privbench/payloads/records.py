"""The form of a payload store's index: every record checked field by field when the store is opened, so that a
malformed one is refused in one line instead of failing where it is used."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from privbench.errors import StoreError

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _problem(record: Any) -> str | None:
    """Why ``record`` is not an index entry ``Payload.record`` could have written, or None."""
    if not isinstance(record, dict):
        return "not an object"
    for key in ("id", "kind", "sender", "receiver"):
        if not isinstance(record.get(key), str):
            return f"its {key} is not a string"
    if not _int(record.get("round")) or not _int(record.get("nbytes")) or record["nbytes"] < 0:
        return "its round or nbytes is not a whole number"
    if not isinstance(record.get("stored"), bool):
        return "its stored flag is not true or false"
    names, shapes, dtypes = record.get("names"), record.get("shapes"), record.get("dtypes")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return "its names are not a list of strings"
    if not isinstance(shapes, dict) or not isinstance(dtypes, dict):
        return "its shapes or dtypes are not objects"
    for n in names:
        shape = shapes.get(n)
        if not isinstance(shape, list) or not all(_int(s) and s >= 0 for s in shape):
            return f"the shape of {n[:60]!r} is not a list of sizes"
        if not isinstance(dtypes.get(n), str):
            return f"the dtype of {n[:60]!r} is not a string"
    if "sha256" in record and not (isinstance(record["sha256"], str) and HEX64.match(record["sha256"])):
        return "its sha256 is not 64 hex digits"
    for key in ("training", "condensation"):
        if record.get(key) is not None and not isinstance(record[key], dict):
            return f"its {key} is not an object"
    return None


def check_records(records: Any, index: Path) -> list[str]:
    """The ids of ``records`` (a parsed index), after checking each record's form and that it reads as a payload.

    Raises:
        StoreError: not a list of records, or a record that is malformed (named by its position and id).
    """
    from privbench.payloads.payload import Payload

    if not isinstance(records, list):
        raise StoreError(f"{index} is not a payload index (not a list of records)")
    ids = []
    for i, record in enumerate(records):
        problem = _problem(record)
        if problem is None:
            try:
                Payload.from_record(record)
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                problem = f"it does not read as a payload ({str(exc).splitlines()[0][:120] if str(exc) else exc!r})"
        if problem is not None:
            label = str(record.get("id")) if isinstance(record, dict) and isinstance(record.get("id"), str) else "?"
            raise StoreError(f"{index}: record {i} ({label[:60]}) is malformed: {problem}")
        ids.append(str(record["id"]))
    return ids
