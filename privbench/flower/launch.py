"""Running a run's clients on a Flower grid: a deployment's (``FlowerGrid``), or a simulation's (``simulation.py``)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flwr.serverapp import Grid

from privbench.errors import ConfigError
from privbench.fl.engine.base import Engine, Launcher, T
from privbench.fl.wire import Wire
from privbench.flower.capture import REPLY_TIMEOUT_S, CapturingGrid
from privbench.flower.engine import FlowerEngine


def flower_problem(protocol: Any) -> str | None:
    """Why ``protocol`` cannot run with its clients as Flower ClientApps (None: it can): its clients must run in
    processes of their own (this module imports Flower, so reaching it means Flower is installed)."""
    problem: str | None = protocol.remote_problem()
    return problem


class FlowerGrid(Launcher):
    """The clients on a Flower deployment's SuperNodes: the ServerApp's ``grid``, every message captured there."""

    name = "flower"

    def __init__(self, grid: Grid, *, reply_timeout: float = REPLY_TIMEOUT_S) -> None:
        if not reply_timeout > 0:
            raise ConfigError(f"engine.reply_timeout={reply_timeout!r}: must be a number of seconds > 0")
        self.grid, self.reply_timeout = grid, float(reply_timeout)

    def problem(self, protocol: Any) -> str | None:
        return flower_problem(protocol)

    def launch(self, session: Callable[[Engine], T], *, config: str, wire: Wire, num_clients: int,
               num_agnostic: int) -> T:
        return session(FlowerEngine(CapturingGrid(self.grid, wire, timeout=self.reply_timeout), config=config,
                                    num_clients=num_clients, num_agnostic=num_agnostic))
