"""The attack contract: one call on a typed view, a typed finding back."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

import torch
from torch import nn

from privbench.attacks.findings import Finding
from privbench.attacks.views import ViewKind
from privbench.payloads import kind as payload_kind
from privbench.payloads.kinds import Carries, kinds_where

__all__ = ["Attack"]

#: The view an attack takes and the finding it returns.
V = TypeVar("V")
F = TypeVar("F", bound=Finding)


class Attack(ABC, Generic[V, F]):
    """Anything the audit can point at a recorded payload: one call, ``attack(view, seed=...)``, generic in the view
    it takes (``V``) and the finding of its family it returns (``F``).

    Subclasses set ``name``, ``reads`` (what a payload must carry: ``gradient``, ``model`` or
    ``basis``; which kinds qualify comes from the payload kinds' specs) and ``view`` (the view
    they take: ``gradient`` an ``AttackTarget``, ``model`` a ``ModelView`` or, for an aggregate,
    a ``CohortView``, ``basis`` a ``BasisView``), and return a ``Finding`` of their family
    (``docs/extending.md``).
    """

    name: ClassVar[str] = "attack"
    reads: ClassVar[frozenset[Carries]] = frozenset()
    view: ClassVar[ViewKind] = "gradient"
    #: replay the client's local training (model payloads; gradient inversions only).
    unroll: bool = False
    #: a label-view attack that reads every image a model upload was trained on (its public ``num_samples``), not
    #: the ``victim.num_images`` a reconstruction rebuilds.
    counts_upload: ClassVar[bool] = False

    @abstractmethod
    def attack(self, view: V, *, seed: int) -> F:
        """What the attacker infers from ``view`` (what the threat model gives it), drawing randomness from ``seed``."""

    def attack_many(self, views: list[V], *, seed: int) -> list[F]:
        """``attack`` on each view (several victims); an attack may batch them, with the same results."""
        return [self.attack(view, seed=seed) for view in views]

    def budget(self) -> dict[str, Any]:
        """What the attack spent or may spend (steps, restarts, settings), recorded in ``threat_model.json`` next to
        what it was given; empty for an attack without one."""
        return {}

    def check_model(self, model: nn.Module, image_shape: tuple[int, ...]) -> None:
        """Refuse (``AttackNotApplicableError``, one line) a model this attack cannot run on; called before
        training. Any model by default."""

    def evaluate(self, view: V, truth: torch.Tensor) -> dict[str, Any]:
        """Figures only the evaluator can compute (it holds ``truth``, the private images in [0, 1]); none by default."""
        return {}

    def cannot_face(self, *, clip: float | None) -> str | None:
        """Why this attack cannot attack uploads trained with per-sample clipping at ``clip`` (DP-SGD; None: no
        clipping), or None (checked before training)."""
        return None

    def cannot_read(self, kind: str) -> str | None:
        """Why this attack cannot read a ``kind`` payload, or None if it can."""
        spec = payload_kind(kind)
        if not spec.readable:
            return spec.unreadable_why
        if spec.carries in self.reads:
            return None
        readable = [k for c in sorted(self.reads) for k in kinds_where(carries=c, readable=True)]
        return (f"attack {self.name} reads payloads carrying a {' or a '.join(sorted(self.reads))} "
                f"({', '.join(readable)}); {kind} carries a {spec.carries}")


