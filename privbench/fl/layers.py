"""A model's layers (modules that own parameters) and their state names: the unit that partial uploads send."""
from __future__ import annotations

from collections.abc import Iterable

from torch import nn


def layers(model: nn.Module) -> dict[str, list[str]]:
    """Layers in model order: each module that owns parameters, mapped to its state names.

    A layer's names are its own parameters (weight and bias) and floating buffers (e.g.
    BatchNorm's running statistics), as they appear in ``model.state_dict()``.

    Example:
        >>> layers(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)))
        {'0': ['0.weight', '0.bias'], '2': ['2.weight', '2.bias']}
    """
    out: dict[str, list[str]] = {}
    for name, module in model.named_modules():
        own = [n for n, _ in module.named_parameters(recurse=False)]
        if not own:
            continue
        prefix = f"{name}." if name else ""
        bufs = [n for n, b in module.named_buffers(recurse=False) if b.is_floating_point()]
        out[name] = [prefix + n for n in own + bufs]
    return out


def state_names(layer_map: dict[str, list[str]], chosen: Iterable[str]) -> list[str]:
    """The state names of the ``chosen`` layers (``layer_map`` as ``layers()`` returns it).

    Example:
        >>> state_names({"0": ["0.weight", "0.bias"], "2": ["2.weight"]}, ["2"])
        ['2.weight']
    """
    return [n for layer in chosen for n in layer_map[layer]]
