"""Train on Flower's simulation engine: the ServerApp runs here, ClientApps in Ray actors."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from flwr.app import ConfigRecordValues, Context
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation
from omegaconf import OmegaConf

from privbench.data import FederatedData
from privbench.fl.protocols import ProtocolResult
from privbench.fl.wire import Wire
from privbench.flower.capture import CapturingGrid
from privbench.flower.client_app import app as client_app
from privbench.flower.engine import FlowerEngine

if TYPE_CHECKING:
    from torch import nn

    from privbench.audit.run import Plan


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


def train_on_flower(p: "Plan", *, model: "nn.Module", data: FederatedData, wire: Wire) -> ProtocolResult:
    """Run ``p.protocol`` with its clients as Flower ClientApps on ``data.num_clients`` simulated SuperNodes.

    Every message is recorded on ``wire`` as it passes the ServerApp's grid.
    """
    config = OmegaConf.to_yaml(p.cfg, resolve=True)
    outcome: dict[str, Any] = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            engine = FlowerEngine(CapturingGrid(grid, wire), config=config, num_clients=data.num_clients)
            outcome["result"] = p.protocol.run(model=model, data=data, victim=p.victim, wire=wire, seed=p.seed,
                                               engine=engine)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    backend: dict[str, dict[str, ConfigRecordValues]] = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
               "init_args": {"num_cpus": client_slots(), "include_dashboard": False, "log_to_driver": False}}
    with _environment(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PRIVBENCH_CLIENT_THREADS="1"):
        run_simulation(server_app=server_app, client_app=client_app, num_supernodes=data.num_clients,
                       backend_config=backend)
    if "error" in outcome:
        raise outcome["error"]
    if "result" not in outcome:
        raise RuntimeError("Flower's simulation ended before the ServerApp finished")
    result: ProtocolResult = outcome["result"]
    return result
