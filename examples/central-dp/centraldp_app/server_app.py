"""The ServerApp: FedAvg inside Flower's server-side fixed-clipping DP wrapper (equal shares, so uniform weights)."""
from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

from centraldp_app.task import LeNet

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    torch.manual_seed(5)
    cfg = context.run_config
    fedavg = FedAvg(fraction_train=1.0, min_train_nodes=4, min_available_nodes=4)  # equal shares: uniform weights
    strategy = DifferentialPrivacyServerSideFixedClipping(fedavg, noise_multiplier=float(cfg["noise-multiplier"]),
                                                          clipping_norm=float(cfg["clipping-norm"]),
                                                          num_sampled_clients=4)
    strategy.start(grid=grid, initial_arrays=ArrayRecord(LeNet().state_dict()), num_rounds=int(cfg["num-server-rounds"]))
