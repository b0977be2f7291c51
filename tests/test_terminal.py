"""What a terminal shows: an audit run in a pseudo-terminal, its output replayed in a terminal emulator (pyte)."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

pyte = pytest.importorskip("pyte")

COLUMNS, ROWS = 100, 30
#: A small audit whose attack converges on its first attempt, so planned restarts are skipped.
SMALL = ["fl=fedavg", "payload=gradient", "fl.rounds=1", "fl.participants=2", "data.num_clients=4",
         "data.partition=iid", "fl.local_epochs=1", "attack.iterations=40", "attack.restarts=4",
         "attack.converged=0.5", "metrics.lpips=false"]
STAMP = re.compile(r"\[\d\d:\d\d:\d\d\] ")


def _in_a_terminal(args: list[str], cwd: Path) -> bytes:
    """Everything ``python -m privbench ARGS`` writes to a COLUMNS x ROWS pseudo-terminal (stdout and stderr)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {**os.environ, "TERM": "xterm", "COLUMNS": str(COLUMNS), "LINES": str(ROWS), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "privbench", *args], cwd=cwd, env=env,
                            stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal closed: the process ended
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(master)
    assert proc.returncode == 0, out.decode(errors="replace")[-3000:]
    return bytes(out)


def _screen_lines(raw: bytes) -> list[str]:
    """Every line the terminal showed, scrolled-off ones included, as the emulator rendered them."""
    screen = pyte.HistoryScreen(COLUMNS, ROWS, history=10_000)
    pyte.ByteStream(screen).feed(raw)
    scrolled = ["".join(line[x].data for x in range(COLUMNS)).rstrip() for line in screen.history.top]
    return [line for line in scrolled + [row.rstrip() for row in screen.display] if line]


@pytest.mark.slow
def test_progress_renders_cleanly_in_a_terminal(tmp_path):
    raw = _in_a_terminal([*SMALL, f"results_dir={tmp_path}"], tmp_path)
    lines = _screen_lines(raw)
    text = raw.decode(errors="replace")
    logged = [line for line in lines if ": started" in line or " done in " in line]
    assert logged, lines
    for line in logged:  # each log line on its own, in the one console style
        assert STAMP.match(line), f"log line glued to something: {line!r}"
        assert "phases [" not in line, f"log line glued to the audit bar: {line!r}"
    assert not any(re.search(r"\[\d{4}-\d\d-\d\d", line) for line in lines), "a second timestamp style"
    assert not any("] , " in line or line.startswith(", ") for line in lines), "stray punctuation"
    totals = {int(n) for n in re.findall(r"audit \d+/(\d+) phases", text)}
    assert len(totals) == 1, totals
    total = totals.pop()
    assert f"audit {total}/{total} phases" in text  # the bar reached its total although restarts were skipped
    assert sum(", restart " in line and "done in" in line for line in logged) < 4  # restarts were skipped
    assert any(line.startswith("leakage") for line in lines) and any(line.startswith("results:") for line in lines)
