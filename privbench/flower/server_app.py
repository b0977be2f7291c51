"""privbench's ServerApp for a Flower deployment: one audit, its clients on the federation's SuperNodes.

Run config keys (``flwr run ... --run-config``): ``overrides``, privbench's Hydra overrides
separated by spaces (``fl.engine=flower`` is added); ``run-dir``, the run's folder (default
``results_dir/<name>/<timestamp>``, relative to where the SuperLink runs the ServerApp). The
federation needs one SuperNode per client: ``partition-id`` 0..N-1 the known clients, N.. the
agnostic ones (GENE-FL and cluster-FedAvg with ``data.num_agnostic_clients`` > 0).
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from privbench.data import FederatedData
from privbench.fl.wire import Wire
from privbench.flower.capture import CapturingGrid
from privbench.flower.engine import FlowerEngine, engine_for

if TYPE_CHECKING:
    from privbench.audit.run import Plan

T = TypeVar("T")

app = ServerApp()


def on_grid(p: "Plan", grid: Grid, *, data: FederatedData, wire: Wire, session: Callable[[FlowerEngine], T]) -> T:
    """Run ``session`` (the run's training and agnostic clients) with the clients on ``grid``'s SuperNodes."""
    return session(engine_for(p, CapturingGrid(grid, wire), data))


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Compose the audit from the run config and run it, training on this deployment."""
    from privbench.api import compose
    from privbench.audit.run import run_audit

    overrides = [*str(context.run_config.get("overrides", "")).split(), "fl.engine=flower"]
    cfg = compose(overrides)
    run_dir = str(context.run_config.get("run-dir", ""))
    out = Path(run_dir) if run_dir else Path(str(cfg.results_dir)) / str(cfg.name) / datetime.now().strftime(
        "%Y-%m-%d_%H-%M-%S")
    run_audit(cfg, out, grid=grid)
