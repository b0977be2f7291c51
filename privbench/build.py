"""Instantiate a config group's ``_target_`` with key checking and one-line errors."""
from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from privbench.errors import ConfigError, PrivbenchError, did_you_mean

#: Keys a group config may carry that are metadata, not constructor arguments.
META_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "describe"}


def constructors(obj: Any) -> Iterator[tuple[Callable[..., Any], dict[str, Any]]]:
    """The functions that take ``obj``'s keyword arguments, each with the namespace its annotations are read in: a
    class's ``__init__``, followed up its bases while it passes ``**kwargs`` on; a function itself."""
    if not inspect.isclass(obj):
        yield obj, _namespace(obj)
        return
    for cls in obj.__mro__:
        if "__init__" not in vars(cls) or cls is object:
            continue
        init = vars(cls)["__init__"]
        yield init, _namespace(cls)
        if not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(init).parameters.values()):
            return


def _namespace(obj: Any) -> dict[str, Any]:
    """The globals of the module that defines ``obj`` (empty where it names none)."""
    return getattr(sys.modules.get(getattr(obj, "__module__", None) or ""), "__dict__", {})


def _parameters(target: str) -> dict[str, inspect.Parameter]:
    """Keyword parameters of ``target``; a class's ``**kwargs`` are followed up its bases (``constructors``)."""
    out: dict[str, inspect.Parameter] = {}
    for init, _ in constructors(get_object(target)):
        params = inspect.signature(init).parameters
        out.update({n: p for n, p in params.items() if n != "self" and p.kind is not p.VAR_KEYWORD and n not in out})
    return out


def allowed_keys(target: str) -> list[str]:
    """Keyword arguments accepted by ``target`` (a class or function path)."""
    return [n for n, p in _parameters(target).items() if p.kind is not p.VAR_KEYWORD]


SCALARS = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}


def _hints(target: str) -> dict[str, str]:
    return {n: str(p.annotation) for n, p in _parameters(target).items()}


def _fits(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)


def build(group: str, node: DictConfig | ListConfig, **runtime: Any) -> Any:
    """Instantiate ``node`` (the ``group`` config), adding those ``runtime`` keyword arguments it names.

    A target receives a runtime argument (``seed``, or a model's ``in_channels``,
    ``image_size`` and ``num_classes``) only when its signature names that parameter, so
    any factory can be a ``_target_``.

    Raises:
        ConfigError: a key the target does not accept, or a value it rejects; the message
            names ``group.key`` and the allowed keys or values.
    """
    if not isinstance(node, DictConfig) or "_target_" not in node:
        raise ConfigError(f"{group}: config has no _target_")
    target = str(node._target_)
    allowed = allowed_keys(target)
    for key in map(str, node):
        if key not in META_KEYS and key not in allowed:
            shown_keys = [a for a in allowed if a not in runtime]
            hint = did_you_mean(key, shown_keys, prefix=f"{group}.")
            raise ConfigError(f"{group}.{key}: unknown key{hint}; allowed keys: {', '.join(shown_keys)}")
    hints = _hints(target)
    for name, value in node.items():
        expected = hints.get(str(name))
        if expected in SCALARS and value is not None and not _fits(value, SCALARS[expected]):
            raise ConfigError(f"{group}.{name!s}={value!r}: expected {expected}")
    runtime = {k: v for k, v in runtime.items() if k in allowed}
    plain = OmegaConf.to_container(node, resolve=True)
    assert isinstance(plain, dict)
    kwargs = {str(k): v for k, v in plain.items() if k not in META_KEYS or k == "_target_"}
    try:
        return instantiate(kwargs, **runtime)
    except PrivbenchError:
        raise
    except Exception as exc:  # instantiate wraps constructor errors
        cause: BaseException = exc
        while cause.__cause__ is not None and not isinstance(cause, PrivbenchError):
            cause = cause.__cause__
        if isinstance(cause, PrivbenchError):
            raise cause from None
        raise ConfigError(f"{group}: {cause}") from None
