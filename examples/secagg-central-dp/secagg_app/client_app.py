"""The ClientApp: a NumPyClient; fixedclipping_mod clips its update, then secaggplus_mod masks it."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from flwr.client import ClientApp, NumPyClient
from flwr.client.mod import fixedclipping_mod, secaggplus_mod
from flwr.common import Context

from secagg_app.task import TwoLayer, fit, set_weights, shard, weights


class Client(NumPyClient):
    def __init__(self, pid: int, context: Context) -> None:
        self.net, self.cfg = TwoLayer(), context.run_config
        self.train_loader, self.test_loader = shard(pid, int(self.cfg["batch-size"]))

    def fit(self, parameters, config):
        set_weights(self.net, parameters)
        fit(self.net, self.train_loader, int(self.cfg["local-epochs"]), float(self.cfg["lr"]))
        return weights(self.net), len(self.train_loader.dataset), {}

    def evaluate(self, parameters, config):
        set_weights(self.net, parameters)
        with torch.no_grad():
            loss = sum(F.cross_entropy(self.net(x), y, reduction="sum").item() for x, y in self.test_loader)
        return loss / len(self.test_loader.dataset), len(self.test_loader.dataset), {}


def client_fn(context: Context):
    torch.manual_seed(21 + int(context.node_config["partition-id"]))
    return Client(int(context.node_config["partition-id"]), context).to_client()


app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod, fixedclipping_mod])
