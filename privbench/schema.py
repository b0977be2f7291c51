"""The type and range of every config value privbench reads, declared beside the constructor that reads it and checked
before any compute.

A constructor declares a parameter's range in its type: ``Annotated[int, Number(integer=True, low=1)]``, or a name
below (``PositiveInt``, ``Rate``, ``Switch``, ...); a parameter that takes a dict of another class's arguments is
``Annotated[dict, Nested(Cls)]`` (``fl.gene``: ``GeneSettings``). ``check_schema`` finds each config section's
constructor, its ``_target_`` (or ``SECTIONS``: the sections the audit reads itself), follows it up its bases as
``privbench.build`` does, and checks every key the section carries. A user's own ``_target_`` is checked the same
way. Keys that take one of a few names (``fl.subspace``, ``fl.gene.select``, ...) are checked by the class that
reads them, against its own list.

Example:
    >>> check_schema({"fl": {"_target_": "privbench.fl.protocols.FedAvg", "rounds": 0}})
    Traceback (most recent call last):
    ...
    privbench.errors.ConfigError: fl.rounds=0: must be an integer >= 1
"""
from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Protocol

from privbench.build import constructors
from privbench.errors import ConfigError, shown


class Rule(Protocol):
    """What a value must be: ``problem`` says why a value is not allowed, or None."""

    def problem(self, value: Any) -> str | None: ...

    def allowed(self) -> str:
        """What a value must be, in words (``--help`` prints it beside the key)."""
        ...


@dataclass(frozen=True)
class Number:
    """An int (``integer``) or a float in ``[low, high]``, bounds open where ``open_low``/``open_high``."""

    integer: bool = False
    low: float = -math.inf
    high: float = math.inf
    open_low: bool = False
    open_high: bool = False
    nullable: bool = False

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not allowed, or None."""
        if value is None and self.nullable:
            return None
        kind = "an integer" if self.integer else "a number"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (self.integer and isinstance(value, float)):
            return f"must be {kind}{self._range()}"
        too_low = value <= self.low if self.open_low else value < self.low
        too_high = value >= self.high if self.open_high else value > self.high
        return f"must be {kind}{self._range()}" if too_low or too_high else None

    def allowed(self) -> str:
        """What a value must be, in words.

        Example:
            >>> Number(integer=True, low=1, high=10).allowed(), Number(low=0, open_low=True, nullable=True).allowed()
            ('an integer >= 1 and <= 10', 'a number > 0, or null')
        """
        return f"{'an integer' if self.integer else 'a number'}{self._range()}" + (", or null" if self.nullable else "")

    def _range(self) -> str:
        parts = []
        if self.low > -math.inf:
            parts.append(f"{'>' if self.open_low else '>='} {_num(self.low)}")
        if self.high < math.inf:
            parts.append(f"{'<' if self.open_high else '<='} {_num(self.high)}")
        return " " + " and ".join(parts) if parts else ""


@dataclass(frozen=True)
class IntList:
    """A list of integers in ``[low, high]``."""

    low: int = 0
    high: int = 2**31

    def allowed(self) -> str:
        return f"a list of integers in [{self.low}, {self.high}]"

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            return "must be a list of integers, e.g. [8, 9]"
        bad = [v for v in value if not self.low <= v <= self.high]
        return f"{bad[0]} is out of range [{self.low}, {self.high}]" if bad else None


@dataclass(frozen=True)
class FractionList:
    """A non-empty list of numbers strictly between 0 and 1."""

    def allowed(self) -> str:
        return "a non-empty list of numbers in (0, 1)"

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, list) or not value or any(isinstance(v, bool) or not isinstance(v, (int, float))
                                                           for v in value):
            return "must be a non-empty list of numbers, e.g. [0.05, 0.1]"
        bad = [v for v in value if not 0 < v < 1]
        return f"{bad[0]} is out of range (0, 1)" if bad else None


@dataclass(frozen=True)
class Gamma:
    """GENE-FL's gamma: a whole count of layers (``2``) or a fraction in (0, 1) (``0.5``)."""

    def allowed(self) -> str:
        return "a count of layers (an integer >= 1) or a fraction in (0, 1)"

    def problem(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "must be a count of layers (an integer >= 1) or a fraction in (0, 1)"
        if isinstance(value, int):
            return None if value >= 1 else "a count of layers must be >= 1"
        if 0 < value < 1:
            return None
        if value == int(value) and value >= 1:
            return (f"is ambiguous: write {int(value)} for {int(value)} layer(s), or a fraction below 1 "
                    "(0.999 keeps every layer)")
        return "must be a count of layers (an integer >= 1) or a fraction in (0, 1)"


@dataclass(frozen=True)
class Flag:
    """``true`` or ``false``."""

    def allowed(self) -> str:
        return "true or false"

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else "must be true or false"


def _num(x: float) -> str:
    return str(int(x)) if x == int(x) else str(x)


POSITIVE_INT = Number(integer=True, low=1)
COUNT = Number(integer=True, low=0)
POSITIVE = Number(low=0, open_low=True)
NON_NEGATIVE = Number(low=0)
FRACTION = Number(low=0, high=1)
#: Rates and weights beyond these are finite but no run can use them (training diverges, the noise drowns all).
RATE = Number(low=0, open_low=True, high=100)
WEIGHT = Number(low=0, high=1e6)

#: The usual ranges, as types a constructor's parameters take.
PositiveInt = Annotated[int, POSITIVE_INT]
Count = Annotated[int, COUNT]
Positive = Annotated[float, POSITIVE]
NonNegative = Annotated[float, NON_NEGATIVE]
Fraction = Annotated[float, FRACTION]
Rate = Annotated[float, RATE]
Weight = Annotated[float, WEIGHT]
#: A probability strictly between 0 and 1 (a delta, a confidence level).
Probability = Annotated[float, Number(low=0, high=1, open_low=True, open_high=True)]
#: A clipping norm or range: positive and finite.
ClipNorm = Annotated[float, Number(low=0, open_low=True, high=1e6)]
#: ``true`` or ``false`` (YAML's), never a string such as ``maybe``, a number or null.
Switch = Annotated[bool, Flag()]
#: Attack budgets shared by several families: optimiser steps, restarts, public images the server or attacker holds,
#: shadow models, membership candidates, and a scoring batch (each bounds a loop or a working set).
Iterations = Annotated[int, Number(integer=True, low=1, high=10**7)]
Restarts = Annotated[int, Number(integer=True, low=1, high=10**4)]
PublicImages = Annotated[int, Number(integer=True, low=2, high=10**7)]
Shadows = Annotated[int, Number(integer=True, low=2, high=10**5)]
Candidates = Annotated[int, Number(integer=True, low=2, high=10**6)]
ScoringBatch = Annotated[int, Number(integer=True, low=1, high=10**5)]


@dataclass(frozen=True)
class Nested:
    """A parameter that takes a dict of ``of``'s keyword arguments (``fl.gene``: ``GeneSettings``): its keys are
    checked by ``of``'s declared ranges."""

    of: Callable[..., Any]


#: Sections the audit reads itself (no ``_target_``), and the class whose parameters declare their ranges.
SECTIONS = {"victim": "privbench.victim.Victim", "metrics": "privbench.metrics.settings.ScoringSettings"}


def _declared(annotation: Any, namespace: dict[str, Any]) -> tuple[Any, ...]:
    """The metadata of an ``Annotated`` parameter type (a string under postponed annotations); () otherwise, or when
    the type does not evaluate (a name imported only for type checkers)."""
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, dict(namespace))  # noqa: S307 -- the constructor's own annotation
        except Exception:
            return ()
    return tuple(getattr(annotation, "__metadata__", ())) if typing.get_origin(annotation) is Annotated else ()


def rules_of(obj: Any) -> dict[str, Rule]:
    """The declared range of each keyword parameter of ``obj`` (a class or function), a ``Nested`` one's keys as
    ``name.key``.

    Example:
        >>> from privbench.fl.genefl.settings import GeneSettings
        >>> rules_of(GeneSettings)["adaptive"]
        Flag()
    """
    out: dict[str, Rule] = {}
    seen: set[str] = set()
    for init, namespace in constructors(obj):
        for name, param in inspect.signature(init).parameters.items():
            if name == "self" or name in seen or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            seen.add(name)
            for meta in _declared(param.annotation, namespace):
                if isinstance(meta, Nested):
                    out.update({f"{name}.{key}": rule for key, rule in rules_of(meta.of).items()})
                elif callable(getattr(meta, "problem", None)):
                    out[name] = meta
    return out


@lru_cache(maxsize=256)
def _target_rules(target: str) -> dict[str, Rule]:
    from hydra.utils import get_object

    try:
        return rules_of(get_object(target))
    except Exception:  # not importable, or no signature (a constant, a builtin): building it says why, in one line
        return {}


def section_rules(section: str, node: Any) -> dict[str, Rule]:
    """The rules of a config section: its ``_target_``'s declared ranges, or its ``SECTIONS`` class's."""
    target = node.get("_target_") if isinstance(node, dict) else None
    target = target if isinstance(target, str) else SECTIONS.get(section)
    return _target_rules(target) if target else {}


def _select(cfg: dict[str, Any], key: str) -> tuple[bool, Any]:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def check_schema(cfg: dict[str, Any]) -> None:
    """Raise a one-line ``ConfigError`` naming the first key whose value breaks the range its constructor declares."""
    for section, node in cfg.items():
        for key, rule in section_rules(str(section), node).items():
            present, value = _select(node, key)
            if present and (problem := rule.problem(value)):
                raise ConfigError(f"{section}.{key}={shown(value)}: {problem}")
