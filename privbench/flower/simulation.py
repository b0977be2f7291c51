"""``engine=flower``: train on Flower's simulation engine, the ServerApp here and the ClientApps in Ray actors."""
from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from flwr.app import ConfigRecordValues, Context
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation
from hydra.utils import get_object

from privbench.errors import ConfigError
from privbench.fl.engine.base import Engine, Launcher, T
from privbench.fl.wire import Wire
from privbench.flower.capture import REPLY_TIMEOUT_S
from privbench.flower.launch import FlowerGrid, flower_problem
from privbench.progress import quiet_consoles


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
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


class FlowerSimulation(Launcher):
    """One simulated SuperNode per known and agnostic client; every message recorded at the ServerApp's grid.

    Args:
        client_app: the ClientApp as a Flower app reference (``module:attribute``), loaded
            when the simulation starts, as a SuperNode loads the one its app names.
        reply_timeout: seconds to wait for a round's replies before the run fails.
    """

    name = "flower"

    def __init__(self, client_app: str = "privbench.flower.client_app:app",
                 reply_timeout: float = REPLY_TIMEOUT_S) -> None:
        if not reply_timeout > 0:
            raise ConfigError(f"engine.reply_timeout={reply_timeout!r}: must be a number of seconds > 0")
        self.reply_timeout = float(reply_timeout)
        module, _, attribute = client_app.partition(":")
        if not module or not attribute:
            raise ConfigError(f"engine.client_app={client_app!r}: expected module:attribute")
        self.client_app = client_app

    def problem(self, protocol: Any) -> str | None:
        return flower_problem(protocol)

    def launch(self, session: Callable[[Engine], T], *, config: str, wire: Wire, num_clients: int,
               num_agnostic: int) -> T:
        outcome: dict[str, Any] = {}
        server_app = ServerApp()

        @server_app.main()
        def main(grid: Grid, context: Context) -> None:
            try:
                outcome["result"] = FlowerGrid(grid, reply_timeout=self.reply_timeout).launch(session, config=config, wire=wire, num_clients=num_clients,
                                                            num_agnostic=num_agnostic)
            except BaseException as exc:  # re-raised in the caller's thread
                outcome["error"] = exc

        client_app = get_object(self.client_app.replace(":", "."))
        if not isinstance(client_app, ClientApp):
            raise TypeError(f"{self.client_app} is not a Flower ClientApp")
        backend: dict[str, dict[str, ConfigRecordValues]] = {
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": client_slots(), "include_dashboard": False, "log_to_driver": False}}
        # Flower's and Ray's own console handlers are detached while they run (Ray imported first, so its logger is
        # set up): their lines reach run.log, the console only their warnings
        with contextlib.suppress(ImportError):
            importlib.import_module("ray")
        with environment(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PRIVBENCH_CLIENT_THREADS="1"), quiet_consoles():
            run_simulation(server_app=server_app, client_app=client_app, num_supernodes=num_clients + num_agnostic,
                           backend_config=backend)
        if "error" in outcome:
            raise outcome["error"]
        if "result" not in outcome:
            raise RuntimeError("Flower's simulation ended before the ServerApp finished")
        result: T = outcome["result"]
        return result
