"""The attack contract (one call on a typed view, a typed finding back) and the gradient-inversion restart loop."""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from privbench.attacks.findings import Finding, Reconstruction
from privbench.attacks.isolation import Isolation
from privbench.attacks.target import UNKNOWN_LABELS, AttackTarget
from privbench.attacks.views import ViewKind
from privbench.errors import AttackNotApplicableError
from privbench.figures import CRAFTED_UPLOADED, RECOVERED_FRACTION
from privbench.payloads import kind as payload_kind
from privbench.payloads.kinds import Carries, kinds_where

__all__ = ["UNKNOWN_LABELS", "ActiveAttack", "Attack", "Attempt", "GradientInversion", "Reconstruction"]


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


class Attack(ABC):
    """Anything the audit can point at a recorded payload: one call, ``attack(view, seed=...)``.

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

    @abstractmethod
    def attack(self, view: Any, *, seed: int) -> Finding:
        """What the attacker infers from ``view`` (what the threat model gives it), drawing randomness from ``seed``."""

    def attack_many(self, views: list[Any], *, seed: int) -> list[Finding]:
        """``attack`` on each view (several victims); an attack may batch them, with the same results."""
        return [self.attack(view, seed=seed) for view in views]

    def budget(self) -> dict[str, Any]:
        """What the attack spent or may spend (steps, restarts, settings), recorded in ``threat_model.json`` next to
        what it was given; empty for an attack without one."""
        return {}

    def check_model(self, model: nn.Module, image_shape: tuple[int, ...]) -> None:
        """Refuse (``AttackNotApplicableError``, one line) a model this attack cannot run on; called before
        training. Any model by default."""

    def evaluate(self, view: Any, truth: torch.Tensor) -> dict[str, Any]:
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


#: The client's checks of a download an active attack may be built to pass (``defenses.detector``).
CLIENT_CHECKS = ("architecture", "aligned_rows", "first_relu_firing")


class ActiveAttack(Attack):
    """An active server's attack: it crafts the victim's download of the audited round (``craft``), the victim
    trains on it as usual, and the attack reads the reply (an ``ActiveView``, ``privbench.audit.active``).

    Subclasses name the layer the read needs (``crafted_layer``) and say what they changed (``describe``, for
    ``threat_model.json``). A reply that left that layer out (a learnGene) gives nothing: 0 recovered.
    """

    reads: ClassVar[frozenset[Carries]] = frozenset({"gradient", "model"})
    view: ClassVar[ViewKind] = "active"
    #: test-split images the server may use to set its crafted weights (public data).
    public: int = 1000
    #: how the server isolates the victim inside a secure aggregate (``attacks.isolation``; none by default).
    isolation: Isolation = Isolation()
    #: whether each crafted row fires for few inputs (trap weights): then an isolated read drops the rows whose
    #: change is within the secure sum's rounding (``attacks.isolation.within_noise``).
    sparse_rows: ClassVar[bool] = False

    @abstractmethod
    def craft(self, model: nn.Module, public: torch.Tensor, *, seed: int, mean: tuple[float, ...],
              std: tuple[float, ...]) -> nn.Module:
        """The download the server sends instead of ``model``; ``public`` in model input space, normalised by
        ``mean`` and ``std`` (the run's public normalisation)."""

    @abstractmethod
    def crafted_layer(self, crafted: nn.Module) -> str:
        """The layer of ``crafted`` (as ``privbench.fl.layers`` names layers) whose reply the read needs."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What the server changed and the attack's budget, for ``threat_model.json``."""

    def designed_against(self) -> dict[str, str]:
        """What the crafted download assumes of the client's checks (``defenses.detector.inspect_download``): for
        each, whether it was built to pass it, and why (``threat_model.json``'s ``client_checks``)."""
        return {check: "not designed to pass" for check in CLIENT_CHECKS}

    def crafted_rows(self, crafted: nn.Module) -> torch.Tensor:
        """The output units of ``crafted_layer`` the server crafted (all of them by default)."""
        weight = crafted.get_submodule(self.crafted_layer(crafted)).get_parameter("weight")
        return torch.arange(weight.shape[0])

    def withheld(self, view: Any) -> bool:
        """Whether the reply left the crafted layer out (GENE-FL kept it back)."""
        return not any(name.startswith(f"{view.crafted_layer}.") for name in view.observed)

    def kept_back(self, view: Any) -> bool:
        """Whether GENE-FL's layer choice kept the crafted layer home (the reply is a learnGene without it)."""
        return self.withheld(view) and view.knowledge.get(CRAFTED_UPLOADED.key) is False

    def evaluate(self, view: Any, truth: torch.Tensor) -> dict[str, Any]:
        """The victim's own check of the crafted download (reported beside the attack's figures); a reply without
        the crafted layer returns no image, and that is 0 recovered."""
        out = dict(getattr(view, "client_check", {}))
        if self.withheld(view):
            out[RECOVERED_FRACTION.key] = 0.0
        return out

    def nothing(self, status: str) -> Reconstruction:
        """The finding of a read that gave no image (``status`` says why)."""
        return Reconstruction([{"objective": math.nan, "status": status, "iterations": 0, "evaluations": 0}],
                              label_source="none")


class GradientInversion(Attack):
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

    def __init__(self, *, iterations: int = 300, restarts: int = 4, converged: float = 1e-6,
                 stall_at: float = 0.25, stall_tol: float = 0.05, unroll: bool = False, max_images: int = 64,
                 patience: int = 0) -> None:
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
