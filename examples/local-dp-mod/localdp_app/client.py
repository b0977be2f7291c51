"""The ClientApp, with Flower's LocalDpMod clipping and noising each update before it leaves the node."""
from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import LocalDpMod

from localdp_app.task import MLP, SETTINGS, accuracy, fit, load_data

local_dp = LocalDpMod(clipping_norm=SETTINGS["clip"], sensitivity=SETTINGS["sensitivity"],
                      epsilon=SETTINGS["epsilon"], delta=SETTINGS["delta"])
app = ClientApp()


def _loaders(context: Context):
    return load_data(int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]),
                     int(context.run_config["batch-size"]))


@app.train(mods=[local_dp])  # the mod reads the one ArrayRecord a train reply carries
def train(msg: Message, context: Context) -> Message:
    torch.manual_seed(100 + int(context.node_config["partition-id"]))
    net = MLP()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    trainloader, _ = _loaders(context)
    fit(net, trainloader, int(context.run_config["local-epochs"]), float(context.run_config["learning-rate"]))
    return Message(RecordDict({"arrays": ArrayRecord(net.state_dict()),
                               "metrics": MetricRecord({"num-examples": len(trainloader.dataset),
                                                        "epsilon": SETTINGS["epsilon"]})}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    net = MLP()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    _, testloader = _loaders(context)
    return Message(RecordDict({"metrics": MetricRecord({"accuracy": accuracy(net, testloader),
                                                        "num-examples": len(testloader.dataset)})}), reply_to=msg)
