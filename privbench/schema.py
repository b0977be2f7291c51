"""The type and range of every config value privbench reads, checked before any compute.

A rule applies to a key wherever it is present (``fl.lr`` for every protocol); keys a
config does not carry are skipped. Keys that take one of a few names (``fl.subspace``,
``fl.gene.select``, ...) are checked by the class that reads them, against its own list. A user's own ``_target_`` gets its own keys checked by its
signature's type hints (``privbench.build``), and its ranges by its own code.

Example:
    >>> check_schema({"fl": {"rounds": 0}})
    Traceback (most recent call last):
    ...
    privbench.errors.ConfigError: fl.rounds=0: must be an integer >= 1
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from privbench.errors import ConfigError, shown


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

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            return "must be a list of integers, e.g. [8, 9]"
        bad = [v for v in value if not self.low <= v <= self.high]
        return f"{bad[0]} is out of range [{self.low}, {self.high}]" if bad else None


@dataclass(frozen=True)
class Gamma:
    """GENE-FL's gamma: a whole count of layers (``2``) or a fraction in (0, 1) (``0.5``)."""

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

RULES: dict[str, Any] = {
    "victim.client": COUNT, "victim.round": Number(integer=True, low=-1), "victim.num_images": POSITIVE_INT,
    "victim.data_size": Number(integer=True, low=1, nullable=True),
    "data.num_clients": POSITIVE_INT,
    "data.classes_per_client": POSITIVE_INT, "data.alpha": POSITIVE, "data.min_size": COUNT,
    "data.agnostic_classes": IntList(), "data.num_agnostic_clients": COUNT,
    "model.width": POSITIVE_INT, "model.min_size": COUNT,
    "fl.rounds": POSITIVE_INT, "fl.participants": POSITIVE_INT, "fl.local_epochs": POSITIVE_INT,
    "fl.lr": RATE, "fl.batch_size": POSITIVE_INT, "fl.momentum": Number(low=0, high=1, open_high=True),
    "fl.num_clusters": POSITIVE_INT, "fl.subspace_dim": POSITIVE_INT, "fl.lambda1": WEIGHT, "fl.lambda2": WEIGHT,
    "fl.eps": NON_NEGATIVE, "fl.vectorise": Flag(),
    "fl.gene.gamma": Gamma(),
    "fl.agnostic.epochs": COUNT, "fl.agnostic.lr": RATE, "fl.agnostic.batch_size": POSITIVE_INT,
    "fl.agnostic.samples": COUNT,
    "attack.iterations": Number(integer=True, low=1, high=10**7), "attack.restarts": Number(integer=True, low=1, high=10**4), "attack.converged": NON_NEGATIVE,
    "attack.stall_at": FRACTION, "attack.stall_tol": NON_NEGATIVE, "attack.max_images": POSITIVE_INT, "attack.patience": COUNT,
    "attack.lr": RATE, "attack.tv": WEIGHT, "attack.components": POSITIVE_INT,
    "attack.bins": Number(integer=True, low=1, high=10**5), "attack.public": Number(integer=True, low=2, high=10**7),
    "attack.scale": Number(low=0, open_low=True, high=1e3), "attack.gain": Number(low=0, open_low=True, high=1e3),
    "attack.tolerance": Number(low=0, open_low=True, high=1),
    "attack.rows_trapped": Number(low=0, open_low=True, high=1),
    "attack.sybils": Number(integer=True, low=0, high=10**6), "attack.slots": Number(integer=True, low=1, high=10**4),
    "attack.noise": Number(low=0, high=1e3),
    "attack.canaries": Number(integer=True, low=2, high=10**7), "attack.guesses": Number(integer=True, low=1, high=10**7),
    "attack.confidence": Number(low=0, high=1, open_low=True, open_high=True),
    "defense.noise_multiplier": Number(low=0, high=1e4),
    "defense.target_epsilon": Number(low=0, open_low=True, high=1e6, nullable=True),
    "defense.max_grad_norm": Number(low=0, open_low=True, high=1e6),
    "defense.delta": Number(low=0, high=1, open_low=True, open_high=True), "defense.sigma": Number(low=0, high=1e6),
    "defense.p": FRACTION, "defense.bits": Number(integer=True, low=1, high=16),
    "aggregation.clipping_range": Number(low=0, open_low=True, high=1e6),
    "aggregation.quantization_range": Number(integer=True, low=2, high=2**31),
    "aggregation.modulus_range": Number(integer=True, low=4, high=2**32),
    "aggregation.max_weight": Number(low=0, open_low=True, high=1e12),
    "metrics.recovered_psnr": Number(low=0, high=200), "metrics.recovered_ssim": Number(low=-1, high=1),
}

#: Keys that must be true or false (YAML ``true``/``false``), never a string such as ``maybe``, a number or null:
#: every boolean of the shipped configs (``tests/test_invalid_corpus.py`` checks none is missing).
BOOLEANS = ("resume", "metrics.lpips", "data.download", "attack.unroll", "attack.batched", "attack.fixed_variance",
            "fl.vectorise", "fl.gene.adaptive", "fl.agnostic.fedavg_reference", "aggregation.adaptive",
            "aggregation.agreed_download")
RULES.update({key: Flag() for key in BOOLEANS})
#: Attack sizes that set a working set or a loop's length: bounded here, and in memory by ``privbench.audit.memory``.
RULES.update({
    "attack.shadows": Number(integer=True, low=2, high=10**5), "attack.refits": Number(integer=True, low=0, high=100),
    "attack.max_candidates": Number(integer=True, low=2, high=10**6),
    "attack.batch_size": Number(integer=True, low=1, high=10**5), "attack.records": Number(integer=True, low=1, high=10**6),
    "attack.max_classes": Number(integer=True, low=1, high=10), "attack.dim": Number(integer=True, low=1, high=10**4),
    "attack.points": Number(integer=True, low=1, high=10**4), "attack.rematch": Number(integer=True, low=1, high=10**7),
})


def _select(cfg: dict[str, Any], key: str) -> tuple[bool, Any]:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def check_schema(cfg: dict[str, Any]) -> None:
    """Raise a one-line ``ConfigError`` naming the first key whose value breaks its rule in ``RULES``."""
    for key, rule in RULES.items():
        present, value = _select(cfg, key)
        if present:
            problem = rule.problem(value)
            if problem:
                raise ConfigError(f"{key}={shown(value)}: {problem}")
