"""Atomic file writes: a result file is either complete or absent."""
from __future__ import annotations

import datetime
import os
import tempfile
from pathlib import Path

from privbench.regular import regular


def umask() -> int:
    """This process's umask (read without changing it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename.

    The file gets the mode a plain ``open(path, "w")`` would give (0666 less the umask), not the
    temporary file's 0600, so a group can read shared results when the umask allows it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


#: The file that marks a run folder as held by a running process (its pid inside).
LOCK = ".privbench.lock"


def alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: Files that mark a folder as holding a finished run (or a sweep's pointer to one).
FINISHED = ("metrics.json", "resumed.json")


def claim(folder: Path) -> Path:
    """A run folder no running process holds and no finished run is in: ``folder``, else ``folder-2``, ...

    The claim is a lock file made with ``O_EXCL`` holding this process's pid; one left by a process that is
    gone is taken over. Two runs that get the same folder (same name, same second) never share it.
    """
    folder = Path(folder)
    for i in range(1, 10_000):
        candidate = folder if i == 1 else folder.with_name(f"{folder.name}-{i}")
        if any((candidate / name).exists() for name in FINISHED):
            continue  # a finished run's folder is never written into
        candidate.mkdir(parents=True, exist_ok=True)
        lock = candidate / LOCK
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666 & ~umask())
        except FileExistsError:
            try:
                holder = int(lock.read_text().strip() or 0)
            except (OSError, ValueError):
                holder = 0
            if holder == os.getpid() or (holder and alive(holder)):
                continue
            lock.unlink(missing_ok=True)  # left by a run that is gone
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666 & ~umask())
            except FileExistsError:
                continue
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{os.getpid()}\n")
        return candidate
    raise RuntimeError(f"no free run folder next to {folder}")


def release(folder: Path) -> None:
    """Give up this process's claim on ``folder``."""
    lock = Path(folder) / LOCK
    try:
        if int(lock.read_text().strip() or 0) == os.getpid():
            lock.unlink()
    except (OSError, ValueError):
        pass


def files_named(root: Path, name: str) -> list[Path]:
    """Every regular file called ``name`` below ``root``, sorted; folders that vanish during the walk (a parallel
    sweep job removing its skipped folder) are passed over instead of failing the walk, as ``Path.rglob`` would.
    A pipe, a device or a link leaving ``root`` under that name is passed over too (``privbench.regular``)."""
    found = []
    for folder, _, files in os.walk(root):  # os.walk ignores folders it can no longer list, and follows no link
        if name in files and regular(Path(folder) / name, root):
            found.append(Path(folder) / name)
    return sorted(found)


def new_run_folder(parent: Path, *, now: datetime.datetime | None = None) -> Path:
    """A new folder ``parent/<YYYY-mm-dd_HH-MM-SS>`` (``_2``, ``_3``, ... when taken), created here, so that no
    finished run is written over; two processes never get the same one (``mkdir`` fails for the second)."""
    stamp = (now or datetime.datetime.now()).strftime("%Y-%m-%d_%H-%M-%S")
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        folder = parent / (stamp if n == 1 else f"{stamp}_{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise OSError(f"{parent}: no free run folder for {stamp}")
