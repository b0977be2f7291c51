"""The ClientApp: a NumPyClient behind client_fn, as Flower's examples before the Message API."""
import torch
from flwr.client import ClientApp, NumPyClient
from flwr.common import Context

from legacy_app.task import Net, get_weights, load_data, set_weights, test, train


class FlowerClient(NumPyClient):
    def __init__(self, trainloader, valloader, local_epochs, lr):
        self.net, self.trainloader, self.valloader = Net(), trainloader, valloader
        self.local_epochs, self.lr = local_epochs, lr

    def fit(self, parameters, config):
        set_weights(self.net, parameters)
        train(self.net, self.trainloader, self.local_epochs, self.lr)
        return get_weights(self.net), len(self.trainloader.dataset), {}

    def evaluate(self, parameters, config):
        set_weights(self.net, parameters)
        loss, accuracy = test(self.net, self.valloader)
        return loss, len(self.valloader.dataset), {"accuracy": accuracy}


def client_fn(context: Context):
    torch.manual_seed(int(context.node_config["partition-id"]))
    trainloader, valloader = load_data(context.node_config["partition-id"], context.node_config["num-partitions"],
                                       context.run_config["batch-size"])
    return FlowerClient(trainloader, valloader, context.run_config["local-epochs"], context.run_config["lr"]).to_client()


app = ClientApp(client_fn)
