"""Reading results, stores and payloads: regular files only (never a pipe, a device or a link out of the folder
read), never more than a stated number of bytes, hashed while they are read."""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

#: Most bytes a result file (``metrics.json``, ``config.yaml``, ``resumed.json``, a report's inputs) may hold.
RESULT_BYTES = 64 * 2**20
#: Most bytes a payload store's index or ground-truth table may hold.
INDEX_BYTES = 256 * 2**20
#: Bytes read at a time.
CHUNK = 2**20


class RefusedFile(OSError):
    """A file privbench will not read: not a regular file, a link leaving its folder, or larger than allowed.

    An ``OSError``, so a reader that passes over unreadable files passes over these too."""


def regular(path: Path, root: Path | None = None) -> bool:
    """Whether ``path`` is a regular file (a link counts when it ends at one inside ``root``, if given)."""
    try:
        _resolved(Path(path), root)
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _resolved(path: Path, root: Path | None) -> Path:
    resolved = path.resolve()
    if root is not None and path.is_symlink() and not resolved.is_relative_to(Path(root).resolve()):
        raise RefusedFile(f"{path} is a link to {resolved}, outside {root}")
    return resolved


def read_hashed(path: Path, limit: int, *, root: Path | None = None) -> tuple[bytes, str]:
    """``path``'s bytes and their sha256, computed while reading.

    Raises:
        RefusedFile: ``path`` is not a regular file (a pipe, a device, a folder), is a link leaving ``root``, or
            holds more than ``limit`` bytes (checked before reading and while reading).
        OSError: it cannot be opened.
    """
    path = Path(path)
    resolved = _resolved(path, root)
    # O_NONBLOCK: opening a named pipe does not wait for a writer; O_NOFOLLOW: the file read is the one checked
    fd = os.open(resolved, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedFile(f"{path} is not a regular file (a pipe, a device or a folder), so it is not read")
        if info.st_size > limit:
            raise RefusedFile(f"{path} holds {info.st_size:,} bytes, more than the {limit:,} allowed")
        digest, parts, total = hashlib.sha256(), [], 0
        while chunk := os.read(fd, min(CHUNK, limit + 1 - total)):
            total += len(chunk)
            if total > limit:
                raise RefusedFile(f"{path} grew past the {limit:,} bytes allowed while it was read")
            digest.update(chunk)
            parts.append(chunk)
    finally:
        os.close(fd)
    return b"".join(parts), digest.hexdigest()


def read_regular(path: Path, limit: int = RESULT_BYTES, *, root: Path | None = None) -> bytes:
    """``path``'s bytes, read as ``read_hashed`` reads them."""
    return read_hashed(path, limit, root=root)[0]


def read_text(path: Path, limit: int = RESULT_BYTES, *, root: Path | None = None) -> str:
    """``path``'s text (UTF-8), read as ``read_hashed`` reads them.

    Raises:
        RefusedFile, OSError: as ``read_hashed``; ValueError: not UTF-8.
    """
    return read_regular(path, limit, root=root).decode("utf-8")


#: Most bytes a run's array file (``gallery.npz``, ``membership.npz``) may hold.
ARRAY_BYTES = 2**30


def load_arrays(path: Path) -> Any:
    """A run's ``.npz`` as ``numpy.load`` gives it (no pickled objects), read as ``read_hashed`` reads files."""
    import io

    import numpy as np

    return np.load(io.BytesIO(read_regular(path, ARRAY_BYTES)), allow_pickle=False)
