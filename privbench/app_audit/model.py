"""The app's own model class: the ``nn.Module`` in the app's modules that builds, with no arguments, the named
tensors its train messages carry (or the class ``--model`` names)."""
from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from privbench.app_audit.app import AppError, FlowerApp


def _shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    return {n: tuple(t.shape) for n, t in module.state_dict().items()}


def legacy(carried: Mapping[str, Any]) -> bool:
    """Whether the arrays are a legacy ``Parameters`` list (keys ``0``, ``1``, ...: the state dict's values in order)."""
    return bool(carried) and sorted(carried) == sorted(str(i) for i in range(len(carried)))


def _as_listed(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """A legacy list's shapes keyed as the state dict of a model would list them: by position."""
    return {str(i): shapes[str(i)] for i in range(len(shapes))}


def _fits(cls: type, carried: dict[str, tuple[int, ...]]) -> bool:
    try:
        signature = inspect.signature(cls)
        if any(p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in signature.parameters.values()):
            return False
        built = _shapes(cls())
        if legacy(carried):
            return list(built.values()) == list(_as_listed(carried).values())
        return built == carried
    except Exception:  # a class that cannot be built without arguments is not the one
        return False


def find_model(app: FlowerApp, carried: dict[str, torch.Tensor], named: str | None = None) -> Callable[[], nn.Module]:
    """The class that builds the model the app's messages carry (``named``: ``module:Class``, checked); a legacy
    list of arrays is matched by position against the state dict (as ``NumPyClient`` apps send it)."""
    shapes = {n: tuple(t.shape) for n, t in carried.items()}
    if named is not None:
        module_name, _, attribute = named.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError, ValueError) as exc:
            raise AppError(f"--model {named}: {type(exc).__name__}: {exc}") from None
        if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
            raise AppError(f"--model {named}: not an nn.Module class")
        if not _fits(cls, shapes):
            raise AppError(f"--model {named}: built with no arguments, its tensors are not the {len(shapes)} the "
                           "app's train messages carry (names and shapes)")
        return cls
    root = str(app.root)
    found = []
    for module in list(sys.modules.values()):
        if not (getattr(module, "__file__", None) or "").startswith(root):
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, nn.Module) and cls.__module__ == module.__name__ and _fits(cls, shapes):
                found.append(cls)
    if not found:
        raise AppError(f"{app.name}: no nn.Module class in the app's modules builds, with no arguments, the "
                       f"{len(shapes)} tensors its train messages carry; give --model module:Class")
    return found[0]
