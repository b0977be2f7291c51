"""Train on Flower's simulation engine: the ServerApp runs here, ClientApps in Ray actors."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from flwr.app import ConfigRecordValues, Context
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from privbench.data import FederatedData
from privbench.fl.wire import Wire
from privbench.flower.capture import CapturingGrid
from privbench.flower.client_app import app as client_app
from privbench.flower.engine import FlowerEngine, agnostic_count, engine_for

if TYPE_CHECKING:
    from privbench.audit.run import Plan

T = TypeVar("T")


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set environment variables for the processes started inside (Ray's workers inherit them)."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def client_slots() -> int:
    """ClientApps that run at once: one per core, each on one thread (jobs x threads <= cores)."""
    return max(1, os.cpu_count() or 1)


def on_simulation(p: "Plan", *, data: FederatedData, wire: Wire, session: Callable[[FlowerEngine], T]) -> T:
    """Run ``session`` (the run's training and agnostic clients) in a ServerApp on Flower's simulation engine.

    One simulated SuperNode per known and agnostic client; every message is recorded on
    ``wire`` as it passes the ServerApp's grid. Returns what ``session`` returned.
    """
    outcome: dict[str, Any] = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            engine = engine_for(p, CapturingGrid(grid, wire), data)
            outcome["result"] = session(engine)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    nodes = data.num_clients + agnostic_count(p, data)
    backend: dict[str, dict[str, ConfigRecordValues]] = {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
        "init_args": {"num_cpus": client_slots(), "include_dashboard": False, "log_to_driver": False}}
    with _environment(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PRIVBENCH_CLIENT_THREADS="1"):
        run_simulation(server_app=server_app, client_app=client_app, num_supernodes=nodes, backend_config=backend)
    if "error" in outcome:
        raise outcome["error"]
    if "result" not in outcome:
        raise RuntimeError("Flower's simulation ended before the ServerApp finished")
    result: T = outcome["result"]
    return result
