"""Stacked models: P problems with their own weights in one batch, checked against each problem alone."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from privbench.attacks.im2col import with_im2col
from privbench.attacks.reconstruction import stacked as stacked_module
from privbench.attacks.reconstruction.stacked import StackedModel, unstackable
from privbench.models import ConvNet, LeNet


def _models(cls: type[nn.Module], count: int) -> list[nn.Module]:
    out = []
    for seed in range(count):
        torch.manual_seed(seed)
        out.append(cls(in_channels=1, image_size=28, num_classes=10))
    return out


@pytest.mark.parametrize("im2col_macs", [0, 10**9], ids=["grouped", "im2col"])
@pytest.mark.parametrize("cls", [LeNet, ConvNet])
def test_each_problem_gets_its_own_logits_and_gradient(cls, im2col_macs, monkeypatch):
    monkeypatch.setattr(stacked_module, "MAX_IM2COL_MACS", im2col_macs)
    models = _models(cls, 3)
    images = torch.randn(3, 2, 1, 28, 28)
    labels = torch.tensor([[1, 7], [3, 3], [0, 9]])
    template, _ = with_im2col(models[0], images[0])  # an attacker's model: im2col convolutions are stacked too
    stack = StackedModel(template, [dict(m.named_parameters()) for m in models])
    names = [n for n, _ in models[0].named_parameters()]
    weights = stack.watch(names)
    out = stack(images)
    assert out.shape == (3, 2, 10)
    loss = F.cross_entropy(out.flatten(0, 1), labels.flatten(), reduction="none").view(3, 2).mean(1).sum()
    grads = torch.autograd.grad(loss, weights)
    for p, model in enumerate(models):
        alone = model(images[p])
        assert torch.allclose(out[p], alone, atol=1e-5)
        expected = torch.autograd.grad(F.cross_entropy(alone, labels[p]), list(model.parameters()))
        for name, g, e in zip(names, grads, expected):
            assert torch.allclose(g[p], e, atol=1e-5, rtol=1e-4), name


def test_models_that_cannot_be_stacked_say_why():
    assert unstackable(LeNet(in_channels=1, image_size=28, num_classes=10)) is None
    assert "buffers" in unstackable(nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)))
    assert "LayerNorm" in unstackable(nn.Sequential(nn.Flatten(), nn.LayerNorm(4)))
    assert "grouped" in unstackable(nn.Sequential(nn.Conv2d(2, 2, 3, groups=2)))
    with pytest.raises(ValueError, match="cannot stack Sequential: .*LayerNorm"):
        StackedModel(nn.Sequential(nn.LayerNorm(4)), [])


def test_layers_without_bias_or_affine_terms_stack_too():
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Conv2d(1, 4, 3, bias=False), nn.GroupNorm(2, 4, affine=False), nn.ReLU(), nn.Flatten(),
                            nn.Linear(4 * 6 * 6, 3, bias=False)) for _ in range(2)]
    images = torch.randn(2, 3, 1, 8, 8)
    out = StackedModel(models[0], [dict(m.named_parameters()) for m in models])(images)
    for p, model in enumerate(models):
        assert torch.allclose(out[p], model(images[p]), atol=1e-5)
