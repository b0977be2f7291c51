"""The ServerApp: FedAvg over the SuperNodes."""
from __future__ import annotations

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from quickstart_pt.task import Net

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    torch.manual_seed(0)
    strategy = FedAvg(fraction_train=float(context.run_config["fraction-train"]))
    strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()),
                   train_config=ConfigRecord({"lr": float(context.run_config["lr"])}),
                   num_rounds=int(context.run_config["num-server-rounds"]))
