"""Gradient inversion with restarts: the loop every gradient-matching attack shares, and one restart's outcome."""
from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from privbench.attacks.base import Attack
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.attacks.target import AttackTarget
from privbench.errors import AttackNotApplicableError
from privbench.payloads import kind as payload_kind
from privbench.payloads.kinds import Carries
from privbench.schema import Count, Fraction, Iterations, NonNegative, PositiveInt, Restarts, Switch


class GradientInversion(Attack[AttackTarget, Reconstruction]):
    """A gradient-inversion attack with restarts.

    Args:
        iterations: optimiser steps per attempt.
        restarts: most attempts; each starts from a new random image.
        converged: relative objective below which an attempt counts as converged and no
            further attempt is made.
        stall_at: fraction of ``iterations`` after which an attempt whose relative
            objective is still above ``stall_tol`` is abandoned as stalled.
        stall_tol: see ``stall_at``.
        patience: L-BFGS attacks end an attempt whose objective fell by less than 1 % over
            this many iterations (0: never).
        unroll: for model payloads, replay the client's local training on the candidates
            instead of matching the pseudo-gradient.
        max_images: most images an attack will try to rebuild at once (a ``cluster_model``
            aggregate holds every participant's data); more is refused before optimising.
    """

    reads: ClassVar[frozenset[Carries]] = frozenset({"gradient", "model"})

    def __init__(self, *, iterations: Iterations = 300, restarts: Restarts = 4, converged: NonNegative = 1e-6,
                 stall_at: Fraction = 0.25, stall_tol: NonNegative = 0.05, unroll: Switch = False,
                 max_images: PositiveInt = 64, patience: Count = 0) -> None:
        if iterations < 1 or restarts < 1 or max_images < 1:
            raise ValueError("attack.iterations, attack.restarts and attack.max_images must be >= 1")
        self.iterations, self.restarts, self.unroll, self.max_images = iterations, restarts, unroll, max_images
        self.converged, self.stall_at, self.stall_tol = converged, stall_at, stall_tol
        if patience < 0:
            raise ValueError("attack.patience must be >= 0")
        self.patience = patience

    def attack(self, target: AttackTarget, *, seed: int) -> Reconstruction:
        """Run up to ``restarts`` attempts; keep the one with the lowest finite objective."""
        self.check_size(target)
        attempts: list[Attempt] = []
        evaluations: list[int] = []
        generators = [torch.Generator().manual_seed(seed * 1000 + k) for k in range(self.restarts)]
        before = target.evaluations
        together = self.batched_attempts(target, generators=generators) if self.restarts > 1 else None
        if together is not None:  # every restart at once; each restart's evaluations are an equal share
            attempts = together
            evaluations = [(target.evaluations - before) // len(together)] * len(together)
        for k in range(self.restarts if together is None else 0):
            self.restart = k
            before = target.evaluations
            attempt = self.attempt(target, generator=generators[k])
            attempts.append(attempt)
            evaluations.append(target.evaluations - before)
            if attempt.status == "converged":
                break
        return self.result(target, attempts, evaluations)

    def cannot_read(self, kind: str) -> str | None:
        reason = super().cannot_read(kind)
        if reason is None and getattr(self, "labels", None) == "oracle" and payload_kind(kind).aggregate:
            return (f"attack.labels=oracle hands over one batch's true counts; a {kind} averages several clients', "
                    "whose batches the counts would not say apart")
        return reason

    def budget(self) -> dict[str, Any]:
        """Restarts and optimiser steps per restart (the attack's own settings added by subclasses)."""
        out: dict[str, Any] = {"iterations": self.iterations, "restarts": self.restarts}
        if self.patience:
            out["patience"] = self.patience
        return out

    def check_size(self, target: AttackTarget) -> None:
        """Refuse a target with more images than ``max_images``."""
        if target.num_images > self.max_images:
            raise AttackNotApplicableError(
                f"{target.knowledge.get('payload', 'payload')} holds {target.num_images} private images; attack "
                f"{self.name} rebuilds at most attack.max_images={self.max_images} at once")

    def result(self, target: AttackTarget, attempts: list[Attempt], evaluations: list[int]) -> Reconstruction:
        """The attempt with the lowest finite objective, and the log of every attempt."""
        finite = [a for a in attempts if math.isfinite(a.objective) and a.status != "nan"]
        log = [{"objective": a.objective, "status": a.status, "iterations": a.iterations, "evaluations": e}
               for a, e in zip(attempts, evaluations)]
        if not finite:
            return Reconstruction(log, images=None, labels=None, objective=math.nan,
                                  label_source=self.label_source(target))
        best = min(finite, key=lambda a: a.objective)
        return Reconstruction(log, images=best.images, labels=best.labels, objective=best.objective,
                              label_source=self.label_source(target))

    def label_source(self, target: AttackTarget) -> str:
        """How labels are obtained: ``optimised`` (jointly) or ``recovered`` (analytically)."""
        return "optimised"

    def batched_attempts(self, target: AttackTarget, *, generators: list[torch.Generator]) -> list[Attempt] | None:
        """All restarts as one batched optimisation, equal to running ``attempt`` with each generator in turn;
        None where the attack has no batched form (then restarts run one by one)."""
        return None

    @abstractmethod
    def attempt(self, target: AttackTarget, *, generator: torch.Generator) -> Attempt:
        """One optimisation from a random start drawn with ``generator``."""

    def progress(self, *, desc: str) -> Any:
        """The attempt's progress phase: iterations, restart number and current objective."""
        from privbench.progress import phase

        k = getattr(self, "restart", 0)
        return phase(f"{desc} attack, restart {k + 1}/{self.restarts}", total=self.iterations, unit="it")


@dataclass
class Attempt:
    """One restart's outcome.

    Attributes:
        images: reconstructed images in model input space ``[N, C, H, W]``.
        labels: recovered or optimised labels ``[N]``.
        objective: final objective, relative to the observed gradient's squared norm.
        status: ``converged``, ``stationary`` (steps stopped changing anything), ``budget`` (ran all
            iterations), ``stalled`` or ``nan``.
        iterations: optimiser steps taken.
    """

    images: torch.Tensor
    labels: torch.Tensor
    objective: float
    status: str
    iterations: int
