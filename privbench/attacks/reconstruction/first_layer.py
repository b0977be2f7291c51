"""A model's first fully connected layer as the exact attacks read it (SPEAR, the Cocktail Party Attack): found,
checked to see the image itself, and back-propagated through for one image and one label at a time."""
from __future__ import annotations

import math

import torch
from torch import nn

from privbench.attacks.target import AttackTarget
from privbench.errors import AttackNotApplicableError


def first_linear(model: nn.Module, image_shape: tuple[int, ...], *, attack: str) -> tuple[str, nn.Linear]:
    """The model's first module with parameters, when it is a ``nn.Linear`` on the flattened input; else refused."""
    for name, module in model.named_modules():
        if any(True for _ in module.parameters(recurse=False)):
            if isinstance(module, nn.Linear) and module.in_features == math.prod(image_shape):
                return name, module
            raise AttackNotApplicableError(
                f"attack {attack} inverts a first layer that is fully connected on the flattened image (model=mlp); "
                f"this model's first layer is {type(module).__name__} {name!r}")
    raise AttackNotApplicableError(f"attack {attack}: the model has no parameters")


def sees_input(target: AttackTarget, layer: nn.Linear, name: str, *, attack: str) -> None:
    """Refuse a model that changes the image before ``layer`` (a pre-hook, a scaling): the attack would rebuild the
    layer's input, not the image."""
    probe = torch.randn(2, *target.image_shape, generator=torch.Generator().manual_seed(0))
    seen: list[torch.Tensor] = []
    handle = layer.register_forward_hook(lambda _m, inputs, _o: seen.append(inputs[0].detach()))
    training = target.model.training
    target.model.eval()  # the probe must not move running statistics
    try:
        with torch.no_grad():
            target.model(probe.to(layer.weight.device, layer.weight.dtype))
    finally:
        handle.remove()
        target.model.train(training)
    if not seen or not torch.allclose(seen[0].cpu().double().flatten(1), probe.double().flatten(1), atol=1e-6):
        raise AttackNotApplicableError(f"attack {attack}: the model changes its input before {name} (a pre-hook or "
                                       "a scaling), so the layer's gradient does not hold the images")


def layer_gradients(model: nn.Module, layer: nn.Linear, images: torch.Tensor, classes: int) -> torch.Tensor:
    """``[m, N, classes]``: the loss gradient at ``layer``'s output for each of ``images`` alone under each label
    (float64 on the CPU)."""
    captured: list[torch.Tensor] = []

    def leaf(_m: nn.Module, _i: tuple[torch.Tensor, ...], out: torch.Tensor) -> torch.Tensor:
        captured.append(out.detach().requires_grad_(True))  # a frozen model's output still has a gradient
        return captured[-1]

    handle = layer.register_forward_hook(leaf)
    try:
        with torch.enable_grad():
            logits = model(images.repeat_interleave(classes, 0))
            labels = torch.arange(classes, device=logits.device).repeat(len(images))
            loss = nn.functional.cross_entropy(logits, labels, reduction="sum")
            grad = torch.autograd.grad(loss, captured[0])[0].detach().cpu().double()
    finally:
        handle.remove()
    return grad.reshape(len(images), classes, -1).permute(2, 0, 1)
