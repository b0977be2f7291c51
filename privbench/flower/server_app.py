"""privbench's ServerApp for a Flower deployment: one audit, its clients on the federation's SuperNodes.

Run config keys (``flwr run ... --run-config``): ``overrides``, privbench's Hydra overrides
separated by spaces (``engine=flower`` is added); ``run-dir``, the run's folder (default
``results_dir/<name>/<timestamp>``, relative to where the SuperLink runs the ServerApp). The
federation needs one SuperNode per client: ``partition-id`` 0..N-1 the known clients, N.. the
agnostic ones (GENE-FL and cluster-FedAvg with ``data.num_agnostic_clients`` > 0).
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from privbench.audit.run import run_audit
from privbench.flower.launch import FlowerGrid
from privbench.overrides import compose

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Compose the audit from the run config and run it, training on this deployment."""
    overrides = [*str(context.run_config.get("overrides", "")).split(), "engine=flower"]
    cfg = compose(overrides)
    run_dir = str(context.run_config.get("run-dir", ""))
    out = Path(run_dir) if run_dir else Path(str(cfg.results_dir)) / str(cfg.name) / datetime.now().strftime(
        "%Y-%m-%d_%H-%M-%S")
    run_audit(cfg, out, launcher=FlowerGrid(grid))
