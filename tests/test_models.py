"""Model architectures, sizes by dataset, and Opacus compatibility of the GroupNorm variants."""
from __future__ import annotations

import pytest
import torch
from opacus.validators import ModuleValidator
from torch import nn

from privbench.models import MLP, ConvNet, LeNet, ResNet18, classifier_head


def test_lenet_is_dlgs_architecture():
    torch.manual_seed(0)  # the std check below depends on the draw (a 12-value bias), not on earlier tests
    model = LeNet(in_channels=3, image_size=32, num_classes=10)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (3, 12, (5, 5), (2, 2)), (12, 12, (5, 5), (2, 2)), (12, 12, (5, 5), (1, 1))]
    assert sum(isinstance(m, nn.Sigmoid) for m in model.modules()) == 3
    assert model.fc.in_features == 768  # DLG's 32x32 LeNet: 12 x 8 x 8
    for p in model.parameters():
        assert p.min() >= -0.5 and p.max() <= 0.5 and p.std() > 0.2  # uniform(-0.5, 0.5): std 0.289


@pytest.mark.parametrize("cls", [LeNet, ConvNet, MLP, ResNet18])
@pytest.mark.parametrize("shape, classes", [((1, 28, 28), 10), ((3, 32, 32), 100)])
def test_models_follow_the_dataset(cls, shape, classes):
    model = cls(in_channels=shape[0], image_size=shape[1], num_classes=classes)
    assert model(torch.zeros(2, *shape)).shape == (2, classes)
    assert classifier_head(model) == "fc"


def test_no_inplace_ops_in_resnet():
    model = ResNet18(in_channels=3, image_size=32, num_classes=10, norm="gn")
    assert not any(getattr(m, "inplace", False) for m in model.modules())


@pytest.mark.parametrize("model", [
    ConvNet(in_channels=1, image_size=28, num_classes=10),
    ResNet18(in_channels=3, image_size=32, num_classes=10, norm="gn"),
])
def test_groupnorm_models_pass_opacus_validation(model):
    assert ModuleValidator.validate(model, strict=False) == []


def test_batchnorm_resnet_is_rejected_by_opacus():
    assert ModuleValidator.validate(ResNet18(in_channels=3, image_size=32, num_classes=10, norm="bn"), strict=False)


def test_unknown_norm_fails():
    with pytest.raises(ValueError, match="bn, gn"):
        ResNet18(in_channels=3, image_size=32, num_classes=10, norm="ln")
