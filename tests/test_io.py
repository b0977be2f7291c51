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


def test_two_runs_never_share_a_run_folder(tmp_path):
    from privbench.io import LOCK, claim, release

    first = claim(tmp_path / "run")
    assert first == tmp_path / "run" and (first / LOCK).read_text().strip() == str(os.getpid())
    second = claim(tmp_path / "run")  # held (by this process): the next free sibling
    assert second == tmp_path / "run-2"
    release(first)
    assert claim(tmp_path / "run") == tmp_path / "run"  # released: free again
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / LOCK).write_text("999999999\n")  # a pid no process has
    assert claim(tmp_path / "gone") == tmp_path / "gone"


def test_a_reused_training_resolves_to_the_run_that_holds_its_payloads(tmp_path):
    from privbench.audit.resume import trained

    runs = [(tmp_path / "attacked-again", {"training_key": "k", "trained_in": str(tmp_path / "trained")}),
            (tmp_path / "trained", {"training_key": "k"})]
    assert trained(runs, "k") == tmp_path / "trained"
    assert trained(runs[:1], "k") is None


def test_the_results_walk_passes_over_a_folder_that_vanishes_during_it(tmp_path, monkeypatch):
    import os

    from privbench.audit.resume import finished_runs
    from privbench.io import files_named

    for job in ("0", "1", "2"):
        (tmp_path / job).mkdir()
        (tmp_path / job / "metrics.json").write_text('{"run": {"config_key": "k' + job + '"}}')
    walk = os.walk

    def racing(top, *args, **kwargs):  # a parallel job removes its skipped folder while this walk runs
        import shutil

        for i, entry in enumerate(walk(top, *args, **kwargs)):
            if i == 0:
                shutil.rmtree(tmp_path / "1", ignore_errors=True)
            yield entry
    monkeypatch.setattr(os, "walk", racing)
    assert [p.parent.name for p in files_named(tmp_path, "metrics.json")] == ["0", "2"]
    assert [run["config_key"] for _, run in finished_runs(tmp_path)] == ["k0", "k2"]
