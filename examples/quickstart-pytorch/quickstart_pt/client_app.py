"""The ClientApp: train on the received model, evaluate it."""
from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from quickstart_pt.task import Net, load_data
from quickstart_pt.task import test as test_fn
from quickstart_pt.task import train as train_fn

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    torch.manual_seed(int(context.node_config["partition-id"]))
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    trainloader, _ = load_data(int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]),
                               int(context.run_config["batch-size"]), int(context.run_config["records-per-client"]),
                               float(context.run_config["dominant-share"]))
    loss = train_fn(model, trainloader, int(context.run_config["local-epochs"]), float(msg.content["config"]["lr"]))
    metrics = MetricRecord({"train_loss": loss, "num-examples": len(trainloader.dataset)})
    return Message(content=RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    _, testloader = load_data(int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]),
                              int(context.run_config["batch-size"]), int(context.run_config["records-per-client"]),
                              float(context.run_config["dominant-share"]))
    loss, accuracy = test_fn(model, testloader)
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": accuracy, "num-examples": len(testloader.dataset)})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
