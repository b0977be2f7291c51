"""privbench's ServerApp for a Flower deployment: one audit, its clients on the federation's SuperNodes.

Run config keys (``flwr run ... --run-config``): ``overrides``, privbench's Hydra overrides
separated by spaces (``fl.engine=flower`` is added); ``run-dir``, the run's folder (default
``results_dir/<name>/<timestamp>``, relative to where the SuperLink runs the ServerApp).
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from omegaconf import OmegaConf

from privbench.data import FederatedData
from privbench.fl.protocols import ProtocolResult
from privbench.fl.wire import Wire
from privbench.flower.capture import CapturingGrid
from privbench.flower.engine import FlowerEngine

if TYPE_CHECKING:
    from torch import nn

    from privbench.audit.run import Plan

app = ServerApp()


def train_on_grid(p: "Plan", grid: Grid, *, model: "nn.Module", data: FederatedData, wire: Wire) -> ProtocolResult:
    """Run ``p.protocol`` with the clients on ``grid``'s SuperNodes, recording every message on ``wire``."""
    engine = FlowerEngine(CapturingGrid(grid, wire), config=OmegaConf.to_yaml(p.cfg, resolve=True),
                          num_clients=data.num_clients)
    return p.protocol.run(model=model, data=data, victim=p.victim, wire=wire, seed=p.seed, engine=engine)


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
