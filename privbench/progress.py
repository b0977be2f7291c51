"""Progress of an audit: one bar per phase on a terminal, periodic log lines otherwise.

Each phase (data, a protocol's rounds, the FedAvg reference, agnostic fine-tuning, an
attack's restart or its long loops: shadow training, candidate sets, clients; scoring) is
announced through the ``privbench`` logger, so it reaches the run's log file. On a terminal a
bar per phase shows its own ETA beside an ``audit`` bar over the planned phases (the overall
ETA); without a terminal a plain line is logged every ``PERIOD`` seconds. A phase opened
inside another gets the bar below it and does not count towards the audit bar.

On the console (``ConsoleHandler`` with the ``OwnLines`` filter, as Hydra's logging configs
set it up) only privbench's own lines and other libraries' warnings and errors are shown;
everything, third-party INFO lines and deprecation warnings included, still goes to run.log.

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
#: Phases open now (a phase opened inside another is drawn below it and not counted by the audit bar).
_OPEN: list["Phase"] = []
#: Warning categories that are a library's notice to its own developers, kept off the console.
DEPRECATIONS = ("DeprecationWarning", "PendingDeprecationWarning", "FutureWarning")
#: Markers of Flower's own deprecation notices (logged as warnings on its ``flwr`` logger).
FLOWER_NOTICES = ("DEPRECATED FEATURE", "FEATURE UPDATE")


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

    def __init__(self, name: str, total: int | None, unit: str, *, depth: int = 0) -> None:
        self.name, self.total, self.unit, self.depth = name, total, unit, depth
        self.done, self.start, self.last_line = 0, time.perf_counter(), time.perf_counter()
        self.figures: dict[str, Any] = {}
        self.bar: Any = None
        if on_terminal():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=name, unit=unit, position=1 + depth, leave=False)

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
    """A phase of the audit: logged when it starts and ends, with a bar or periodic lines between.

    A phase opened inside another (an attack's shadow training inside a larger step) is drawn on the line below
    its parent's bar and leaves the audit bar's count alone.
    """
    log.info("%s: started", name)
    nested = bool(_OPEN)
    if not nested:
        OVERALL.started(name)
    p = Phase(name, total, unit, depth=len(_OPEN))
    _OPEN.append(p)
    try:
        yield p
    finally:
        p.close()
        if p in _OPEN:
            _OPEN.remove(p)
        if not nested:
            OVERALL.finished()
    log.info("%s: done in %.1f s%s", name, time.perf_counter() - p.start,
             "".join(f", {k} {_short(v)}" for k, v in p.figures.items()))


def own_line(record: logging.LogRecord) -> bool:
    """Whether a log record is shown on the console: privbench's own (the ``privbench`` logger and its children), or
    another library's warning or error that is not a deprecation notice (Python's ``DeprecationWarning``,
    ``PendingDeprecationWarning`` and ``FutureWarning`` routed by ``logging.captureWarnings``, Flower's
    ``DEPRECATED FEATURE`` lines). Everything else (Flower's INFO lines, Hydra's, ...) goes only to run.log."""
    if record.name == log.name or record.name.startswith(log.name + "."):
        return True
    if record.levelno < logging.WARNING:
        return False
    text = record.getMessage()
    if record.name == "py.warnings":
        return not any(f" {category}: " in text or text.startswith(f"{category}: ") for category in DEPRECATIONS)
    if record.name == "flwr" or record.name.startswith("flwr."):
        return not any(marker in text for marker in FLOWER_NOTICES)
    return True


class OwnLines(logging.Filter):
    """The console's filter: privbench's own lines and other libraries' warnings and errors (``own_line``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return own_line(record)


#: Third-party loggers that write to the console through handlers of their own (Flower's, its telemetry's, and Ray's,
#: which Flower's simulation starts).
OWN_CONSOLES = ("flwr", "flwr-telemetry", "ray")


@contextmanager
def quiet_consoles(names: tuple[str, ...] = OWN_CONSOLES) -> Iterator[None]:
    """Detach the console handlers that ``names``' loggers bring (Flower adds its own to ``flwr`` when imported) and
    let their lines propagate instead, to the handlers privbench's logging set up: the console shows them only as
    ``OwnLines`` allows, run.log keeps them all. Put back on leaving."""
    detached: list[tuple[logging.Logger, logging.Handler]] = []
    propagated: list[tuple[logging.Logger, bool]] = []
    for name in names:
        if name not in logging.root.manager.loggerDict:  # not imported: nothing to quiet (and no logger made)
            continue
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
                logger.removeHandler(handler)
                detached.append((logger, handler))
        propagated.append((logger, logger.propagate))
        logger.propagate = True
    try:
        yield
    finally:
        for logger, handler in reversed(detached):
            logger.addHandler(handler)
        for logger, value in reversed(propagated):
            logger.propagate = value


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
def _attached(handler: logging.Handler) -> Iterator[None]:
    """``handler`` on the ``privbench`` logger at INFO while the block runs, then detached and closed."""
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
    with _attached(handler):
        yield


@contextmanager
def console_log() -> Iterator[None]:
    """Show the ``privbench`` logger's lines (phases, progress) on stderr for a command that Hydra does not set up
    (``python -m privbench.attack``), unless a console handler already does."""
    if any(isinstance(h, ConsoleHandler) for h in log.handlers + logging.getLogger().handlers):
        yield
        return
    handler = ConsoleHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", datefmt="%H:%M:%S"))
    with _attached(handler):
        yield
