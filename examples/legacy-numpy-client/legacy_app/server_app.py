"""The ServerApp: FedAvg from server_fn, with the initial model as a list of arrays."""
import torch
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import ServerApp, ServerAppComponents, ServerConfig
from flwr.server.strategy import FedAvg

from legacy_app.task import Net, get_weights


def server_fn(context: Context):
    torch.manual_seed(0)
    parameters = ndarrays_to_parameters(get_weights(Net()))
    strategy = FedAvg(fraction_fit=1.0, fraction_evaluate=1.0, min_available_clients=3, initial_parameters=parameters)
    return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=context.run_config["num-server-rounds"]))


app = ServerApp(server_fn=server_fn)
