"""Atomic result files: complete or absent, with the mode the umask gives."""
from __future__ import annotations

import os
import stat

import pytest

from privbench.io import atomic_write_bytes, atomic_write_text

@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_file_has_the_mode_the_umask_gives(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "metrics.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "metrics.json").stat().st_mode) == mode
    assert (tmp_path / "metrics.json").read_text() == "{}"

def test_a_failed_write_leaves_neither_the_file_nor_a_temporary(tmp_path):
    with pytest.raises(TypeError):
        atomic_write_bytes(tmp_path / "x.bin", "not bytes")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    atomic_write_bytes(tmp_path / "x.bin", b"\x00\x01")
    assert (tmp_path / "x.bin").read_bytes() == b"\x00\x01" and [p.name for p in tmp_path.iterdir()] == ["x.bin"]
