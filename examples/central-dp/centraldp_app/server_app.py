"""The ServerApp: FedAvg inside Flower's server-side fixed-clipping DP wrapper (equal shares, so uniform weights), or
its adaptive-clipping wrapper where the run config says ``adaptive = true``."""
from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
)

from centraldp_app.task import LeNet

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    torch.manual_seed(5)
    cfg = context.run_config
    fedavg = FedAvg(fraction_train=1.0, min_train_nodes=4, min_available_nodes=4)  # equal shares: uniform weights
    strategy: DifferentialPrivacyServerSideFixedClipping | DifferentialPrivacyServerSideAdaptiveClipping
    if bool(cfg.get("adaptive", False)):
        strategy = DifferentialPrivacyServerSideAdaptiveClipping(
            fedavg, noise_multiplier=float(cfg["noise-multiplier"]), num_sampled_clients=4,
            initial_clipping_norm=float(cfg["clipping-norm"]), clipped_count_stddev=float(cfg["clipped-count-stddev"]))
    else:
        strategy = DifferentialPrivacyServerSideFixedClipping(fedavg, noise_multiplier=float(cfg["noise-multiplier"]),
                                                              clipping_norm=float(cfg["clipping-norm"]),
                                                              num_sampled_clients=4)
    strategy.start(grid=grid, initial_arrays=ArrayRecord(LeNet().state_dict()), num_rounds=int(cfg["num-server-rounds"]))
