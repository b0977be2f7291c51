"""The ServerApp: FedAvg in Flower's client-side fixed-clipping DP wrapper, its fit rounds run by SecAgg+."""
from __future__ import annotations

import torch
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import DifferentialPrivacyClientSideFixedClipping, FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

from secagg_app.task import TwoLayer, weights

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    torch.manual_seed(9)
    cfg = context.run_config
    sampled = int(cfg["sampled-clients"])  # the DP wrapper's cohort size: fraction-train of the nodes
    fedavg = FedAvg(fraction_fit=float(cfg["fraction-train"]), min_fit_clients=sampled, min_available_clients=sampled,
                    initial_parameters=ndarrays_to_parameters(weights(TwoLayer())))
    strategy = DifferentialPrivacyClientSideFixedClipping(fedavg, noise_multiplier=float(cfg["noise-multiplier"]),
                                                          clipping_norm=float(cfg["clipping-norm"]),
                                                          num_sampled_clients=sampled)
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=int(cfg["num-server-rounds"])),
                           strategy=strategy)
    workflow = DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(num_shares=int(cfg["num-shares"]),
                                                               reconstruction_threshold=int(cfg["reconstruction-threshold"])))
    workflow(grid, legacy)
