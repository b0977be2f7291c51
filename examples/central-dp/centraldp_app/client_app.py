"""The ClientApp: local SGD; the update goes unclipped (the server clips)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from centraldp_app.task import LeNet, local_sgd, partition

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    torch.manual_seed(11 + int(context.node_config["partition-id"]))
    net = LeNet()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    trainloader, _ = partition(int(context.node_config["partition-id"]), int(context.run_config["batch-size"]))
    local_sgd(net, trainloader, int(context.run_config["local-epochs"]), float(context.run_config["lr"]))
    return Message(RecordDict({"arrays": ArrayRecord(net.state_dict()),
                               "metrics": MetricRecord({"num-examples": len(trainloader.dataset)})}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    net = LeNet()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    _, testloader = partition(int(context.node_config["partition-id"]), int(context.run_config["batch-size"]))
    with torch.no_grad():
        losses = [F.cross_entropy(net(x), y, reduction="sum").item() for x, y in testloader]
    return Message(RecordDict({"metrics": MetricRecord({"eval_loss": sum(losses) / len(testloader.dataset),
                                                        "num-examples": len(testloader.dataset)})}), reply_to=msg)
