"""Typed records a payload carries: how the sender trained locally, and which layers it condensed."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class AggregatePart:
    """One client's share of an aggregate (a ``cluster_model``), as its upload declared it.

    Attributes:
        client: the sender, e.g. ``"client3"``.
        images: images its upload was computed from.
        num_samples: its sample count (the aggregation weight).
        steps: its local SGD steps.
        batch_size: its local batch size.
        names: the parameter names it uploaded.
    """

    client: str
    images: int
    num_samples: int
    steps: int
    batch_size: int
    names: tuple[str, ...]


@dataclass(frozen=True)
class LocalTraining:
    """How a message's sender trained before sending it (what the server is told or can infer).

    Attributes:
        lr: SGD learning rate.
        steps: optimiser steps taken (1 for a one-step gradient).
        batch_size: local batch size (the batch for a gradient).
        num_samples: samples trained on.
        epochs: local epochs.
        momentum: SGD momentum.
        penalty: the declared settings of a penalty added to the local loss (GENE-FL's weights; empty: none).
        proximal: the weight ``mu`` of a data-independent ``mu ||theta - theta_received||^2`` in that penalty.
        parts: for an aggregate, each contributing client's training (else empty).
        clip: the per-sample clip norm ``C`` of DP-SGD (public under DP-SGD; None: no clipping).

    Example:
        >>> t = LocalTraining(lr=0.1, steps=2, batch_size=1, num_samples=1)
        >>> LocalTraining.from_dict(t.to_dict()) == t
        True
    """

    lr: float
    steps: int
    batch_size: int
    num_samples: int
    epochs: int = 1
    momentum: float = 0.0
    penalty: dict[str, float] = field(default_factory=dict)
    proximal: float = 0.0
    parts: tuple[AggregatePart, ...] = ()
    clip: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (parts as dicts, names as lists; ``clip`` only where declared)."""
        out = asdict(self)
        out["parts"] = [{**p, "names": list(p["names"])} for p in out["parts"]]
        if out["clip"] is None:
            del out["clip"]
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "LocalTraining":
        """The record ``to_dict`` wrote."""
        parts = tuple(AggregatePart(**{**p, "names": tuple(p["names"])}) for p in values.get("parts", ()))
        clip = values.get("clip")
        if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or not clip > 0):
            raise ValueError(f"a training record's clip norm is {clip!r}, not a positive number")
        return cls(**{**values, "parts": parts, "clip": None if clip is None else float(clip)})

    def of_cohort(self, parts: Sequence[AggregatePart]) -> "LocalTraining":
        """The training record of an aggregate of ``parts`` (this record one of theirs): their sample-weighted mean
        step count, their summed samples, and each part.

        Example:
            >>> one = LocalTraining(lr=0.1, steps=2, batch_size=8, num_samples=8)
            >>> parts = [AggregatePart("client0", 8, 8, 2, 8, ("w",)), AggregatePart("client1", 24, 24, 6, 8, ("w",))]
            >>> t = one.of_cohort(parts)
            >>> t.steps, t.num_samples, len(t.parts)
            (5, 32, 2)
        """
        total = sum(p.num_samples for p in parts)
        steps = round(sum(p.steps * p.num_samples for p in parts) / max(total, 1))
        return replace(self, steps=steps, num_samples=total, parts=tuple(parts))

    def hyperparameters(self) -> dict[str, Any]:
        """The scalar settings and the penalty's, as recorded in the threat model."""
        out = {k: v for k, v in self.to_dict().items() if k not in ("parts", "penalty", "proximal")}  # clip if set
        return {**out, **self.penalty}


@dataclass(frozen=True)
class Condensation:
    """GENE-FL's choice of gene layers for one upload.

    Attributes:
        layers: the layers sent, in model order.
        xi: every layer's normalised score.
        gamma: the client's gamma for this upload, where it moves (``fl.gene.adaptive``).
    """

    layers: tuple[str, ...]
    xi: dict[str, float]
    gamma: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (``gamma`` only where set)."""
        out: dict[str, Any] = {"layers": list(self.layers), "xi": dict(self.xi)}
        if self.gamma is not None:
            out["gamma"] = self.gamma
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Condensation":
        """The record ``to_dict`` wrote."""
        gamma = values.get("gamma")
        if gamma is not None and (isinstance(gamma, bool) or not isinstance(gamma, (int, float))):
            raise ValueError(f"a condensation's gamma is {gamma!r}, not a number")
        return cls(tuple(values["layers"]), dict(values["xi"]), None if gamma is None else float(gamma))
