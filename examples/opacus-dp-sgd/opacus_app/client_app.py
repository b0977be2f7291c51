"""The ClientApp: DP-SGD with a fresh Opacus PrivacyEngine each round, as Flower's Opacus example does."""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from opacus import PrivacyEngine

from opacus_app.task import SmallCNN, load_data, test

app = ClientApp()


def _loaders(context: Context):
    return load_data(int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]),
                     int(context.run_config["batch-size"]))


@app.train()
def train(msg: Message, context: Context) -> Message:
    torch.manual_seed(7 + int(context.node_config["partition-id"]))
    net = SmallCNN()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    trainloader, _ = _loaders(context)
    cfg = context.run_config
    engine = PrivacyEngine(secure_mode=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer, private_loader = engine.make_private(
            module=net, optimizer=torch.optim.SGD(net.parameters(), lr=float(cfg["lr"])), data_loader=trainloader,
            noise_multiplier=float(cfg["noise-multiplier"]), max_grad_norm=float(cfg["max-grad-norm"]))
    model.train()
    for _ in range(int(cfg["local-epochs"])):
        for x, y in private_loader:
            if len(y) == 0:
                continue
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    epsilon = engine.get_epsilon(delta=float(cfg["target-delta"]))
    metrics = MetricRecord({"epsilon": epsilon, "num-examples": len(trainloader.dataset)})
    return Message(RecordDict({"arrays": ArrayRecord(net.state_dict()), "metrics": metrics}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    net = SmallCNN()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    _, testloader = _loaders(context)
    loss, accuracy = test(net, testloader)
    return Message(RecordDict({"metrics": MetricRecord({"eval_loss": loss, "eval_acc": accuracy,
                                                        "num-examples": len(testloader.dataset)})}), reply_to=msg)
