"""Models sized by the dataset (channels, image side, classes), and the head lookup attacks use."""
from __future__ import annotations

from torch import nn

from privbench.models.convnet import ConvNet
from privbench.models.lenet import LeNet
from privbench.models.mlp import MLP
from privbench.models.resnet import ResNet18


def classifier_head(model: nn.Module) -> str:
    """Name of the model's last ``nn.Linear`` (the classifier head), e.g. ``"fc"``."""
    names = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    if not names:
        raise ValueError(f"{type(model).__name__} has no linear classifier head")
    return names[-1]


__all__ = ["ConvNet", "LeNet", "MLP", "ResNet18", "classifier_head"]
