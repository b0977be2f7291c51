"""The ServerApp: FedAvg, weighted by each client's number of examples."""
from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from opacus_app.task import SmallCNN

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    torch.manual_seed(3)
    strategy = FedAvg(fraction_train=1.0, min_train_nodes=3, min_available_nodes=3)
    strategy.start(grid=grid, initial_arrays=ArrayRecord(SmallCNN().state_dict()),
                   num_rounds=int(context.run_config["num-server-rounds"]))
