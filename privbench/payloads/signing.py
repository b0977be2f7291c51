"""The key that signs a payload store's index: one per results folder, kept outside every store in it.

A store's own sha256s only show damage: whoever edits ``index.json`` can recompute them. The index and the
ground-truth table are therefore also signed with an HMAC-SHA256 under a secret key, ``.privbench-key`` (mode
0600), kept in the results folder above the store (a store made on its own keeps it in the folder that holds it).
A reader finds the key in the nearest folder above the store that has one. Anyone who can read the key can
sign an edited index, so the key guards against an edited store only where its reader keeps the key to itself.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import tempfile
from pathlib import Path

from privbench.errors import StoreError
from privbench.io import umask
from privbench.regular import read_regular

#: The key's file name, in a results folder (or a folder holding a store).
KEY = ".privbench-key"
#: The signature's file name, inside the store.
SIGNATURE = "index.json.hmac"
#: A key's length in hex characters (32 random bytes).
KEY_CHARS = 64


def find_key(store: Path) -> Path | None:
    """The key file in the nearest folder above ``store`` that holds one, or None."""
    for folder in Path(store).resolve().parents:
        if (folder / KEY).exists() or (folder / KEY).is_symlink():
            return folder / KEY
    return None


def read_key(path: Path) -> bytes:
    """The key in ``path``: a regular file of 64 hex characters.

    Raises:
        StoreError: not a regular file, or not a key.
    """
    try:
        held = path.stat()
    except OSError as exc:
        raise StoreError(f"{path}: not a privbench store key ({exc})") from None
    if held.st_uid != os.getuid() or held.st_mode & 0o077:
        raise StoreError(f"{path}: a store key must be yours and readable by you alone (mode 0600); this one is "
                         f"owned by uid {held.st_uid} with mode {oct(held.st_mode & 0o777)}, so anyone it lets in "
                         "could sign an edited store")
    try:
        text = read_regular(path, 4 * KEY_CHARS).decode("ascii").strip()
        key = bytes.fromhex(text)
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path}: not a privbench store key ({exc})") from None
    if len(key) != KEY_CHARS // 2:
        raise StoreError(f"{path}: not a privbench store key ({len(text)} characters, not {KEY_CHARS})")
    return key


def results_key(folder: Path) -> bytes:
    """The key of the results folder ``folder``: the nearest key in it or above it (so a store signed there still
    verifies from a results folder inside it), else a new one made in it (mode 0600, never replaced). The new key
    is written whole to a temporary file and linked into place, so a job started alongside never reads it half
    written."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    found = find_key(Path(folder) / KEY)
    if found is not None:
        return read_key(found)
    path = Path(folder) / KEY
    fd, temporary = tempfile.mkstemp(prefix=".privbench-key-", dir=folder)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(KEY_CHARS // 2) + "\n")
        os.chmod(temporary, 0o600 & ~umask())
        try:
            os.link(temporary, path)  # fails when another job linked its key first: that one is the key
        except FileExistsError:
            pass
    finally:
        os.unlink(temporary)
    return read_key(path)


def store_key(store: Path) -> bytes:
    """The key a new store at ``store`` is signed with: the nearest one above it, else a new one beside it."""
    found = find_key(store)
    return read_key(found) if found is not None else results_key(Path(store).resolve().parent)


def signature(key: bytes, index: bytes, truth: bytes) -> str:
    """HMAC-SHA256 under ``key`` of the index and the ground-truth table (each prefixed by its length)."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in (index, truth):
        mac.update(len(part).to_bytes(8, "big") + part)
    return mac.hexdigest()


def check_signature(store: Path, index: bytes, truth: bytes, signed: bytes | None, key: bytes | None) -> None:
    """Refuse ``store`` unless ``signed`` is the signature under ``key`` of its index and truth table.

    Raises:
        StoreError: no key, no signature, or a signature that does not match (an edited index or table).
    """
    if key is None:
        raise StoreError(f"{store}: no {KEY} in a folder above it, so its index cannot be verified (its own sha256 "
                         f"proves nothing: whoever edits the index can recompute it); put the key of the results "
                         f"folder it came from above it, or open it as trusted (--trusted-store) if you know its origin")
    if signed is None:
        raise StoreError(f"{store}: {SIGNATURE} is missing, so the index cannot be verified; open it as trusted "
                         "(--trusted-store) only if you know where it came from")
    if not hmac.compare_digest(signed.decode("ascii", "replace").strip(), signature(key, index, truth)):
        raise StoreError(f"{store}: the index or truth table was changed after it was signed ({SIGNATURE} does not "
                         f"match under the key {KEY} above it), or the store was signed with another folder's key")
