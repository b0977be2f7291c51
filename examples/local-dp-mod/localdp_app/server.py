"""The ServerApp: FedAvg."""
from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from localdp_app.task import MLP

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    torch.manual_seed(1)
    FedAvg(fraction_train=1.0, min_train_nodes=2, min_evaluate_nodes=2, min_available_nodes=2).start(
        grid=grid, initial_arrays=ArrayRecord(MLP().state_dict()), num_rounds=int(context.run_config["num-server-rounds"]))
