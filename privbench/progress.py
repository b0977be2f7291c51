"""Progress of an audit: one bar per phase on a terminal, periodic log lines otherwise.

Each phase (data, a protocol's rounds, the FedAvg reference, agnostic fine-tuning, an
attack's restart, scoring) is announced through the ``privbench`` logger, so it reaches the
run's log file. On a terminal a bar per phase shows its own ETA beside an ``audit`` bar
over the planned phases (the overall ETA); without a terminal a plain line is logged every
``PERIOD`` seconds.

Example:
    >>> with phase("scoring", total=3) as p:  # doctest: +SKIP
    ...     for _ in range(3):
    ...         p.update(objective=0.1)
"""
from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger("privbench")
#: Seconds between plain progress lines when stderr is not a terminal.
PERIOD = 10.0


def on_terminal() -> bool:
    """Whether progress bars are drawn (stderr is a terminal)."""
    return sys.stderr.isatty()


class _Overall:
    """The audit-wide bar over planned phases (terminal only)."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.planned = 0

    def plan(self, phases: int) -> None:
        self.planned = phases
        if on_terminal():
            from tqdm.auto import tqdm

            self.close()
            self.bar = tqdm(total=phases, desc="", unit="phase", position=0, leave=False,
                            bar_format="audit {n_fmt}/{total_fmt} phases [{elapsed}<{remaining}] {desc}")

    def started(self, name: str) -> None:
        if self.bar is not None:
            self.bar.set_description_str(name)

    def finished(self) -> None:
        if self.bar is not None and self.bar.n < self.bar.total:
            self.bar.update(1)

    def complete(self) -> None:
        """The audit ended: the bar reaches its total, whatever planned phases were not needed (restarts
        an attack skipped once it converged)."""
        if self.bar is not None:
            self.bar.set_description_str("done")
            self.bar.update(self.bar.total - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar = None


OVERALL = _Overall()


class Phase:
    """One phase's progress: ``update`` after each step, with figures to show (objective, ...)."""

    def __init__(self, name: str, total: int | None, unit: str) -> None:
        self.name, self.total, self.unit = name, total, unit
        self.done, self.start, self.last_line = 0, time.perf_counter(), time.perf_counter()
        self.figures: dict[str, Any] = {}
        self.bar: Any = None
        if on_terminal():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=name, unit=unit, position=1, leave=False)

    def update(self, n: int = 1, **figures: Any) -> None:
        """Count ``n`` more steps; ``figures`` (e.g. ``objective=1e-3``) are shown beside the count."""
        self.done += n
        self.figures.update(figures)
        if self.bar is not None:
            self.bar.update(n)
            if figures:
                self.bar.set_postfix({k: _short(v) for k, v in self.figures.items()}, refresh=False)
        elif time.perf_counter() - self.last_line >= PERIOD:
            self.last_line = time.perf_counter()
            log.info("%s", self.line())

    def line(self) -> str:
        """``name: done/total unit, elapsed, eta, figures`` as plain text."""
        elapsed = time.perf_counter() - self.start
        count = f"{self.done}/{self.total}" if self.total else f"{self.done}"
        eta = ""
        if self.total and self.done:
            eta = f", about {elapsed / self.done * (self.total - self.done):.0f} s left"
        figures = "".join(f", {k} {_short(v)}" for k, v in self.figures.items())
        return f"{self.name}: {count} {self.unit}, {elapsed:.0f} s{eta}{figures}"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


@contextmanager
def phase(name: str, *, total: int | None = None, unit: str = "step") -> Iterator[Phase]:
    """A phase of the audit: logged when it starts and ends, with a bar or periodic lines between."""
    log.info("%s: started", name)
    OVERALL.started(name)
    p = Phase(name, total, unit)
    try:
        yield p
    finally:
        p.close()
        OVERALL.finished()
    log.info("%s: done in %.1f s%s", name, time.perf_counter() - p.start,
             "".join(f", {k} {_short(v)}" for k, v in p.figures.items()))


class ConsoleHandler(logging.StreamHandler):
    """Log lines on the console; on a terminal written through ``tqdm.write``, so a line never lands on a bar."""

    def emit(self, record: logging.LogRecord) -> None:
        if not on_terminal():
            super().emit(record)
            return
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001 - as logging.StreamHandler does
            self.handleError(record)


@contextmanager
def run_log(out: Path) -> Iterator[None]:
    """Write the ``privbench`` logger's lines to ``out/run.log`` unless a handler already does (Hydra's)."""
    target = str((out / "run.log").resolve())
    handlers = logging.getLogger().handlers + log.handlers
    if any(getattr(h, "baseFilename", None) == target for h in handlers):
        yield
        return
    handler = logging.FileHandler(target)
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] %(message)s"))
    handler.setLevel(logging.INFO)
    level = log.level
    log.addHandler(handler)
    if log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        handler.close()
