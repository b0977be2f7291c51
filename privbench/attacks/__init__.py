"""Attacks on recorded messages: the contract here (an ``Attack`` takes a typed view and returns a typed
``Finding``; the one-message views), one folder per family beside it (``README.md`` lists them)."""
from privbench.attacks.base import Attack
from privbench.attacks.findings import Finding
from privbench.attacks.none import NoAttack
from privbench.attacks.target import UNKNOWN_LABELS, AttackTarget, observed_gradient
from privbench.attacks.views import BasisView, CohortView, GradientView, ModelView, ViewKind, at_weights

__all__ = ["UNKNOWN_LABELS", "Attack", "AttackTarget", "BasisView", "CohortView", "Finding", "GradientView",
           "ModelView", "NoAttack", "ViewKind", "at_weights", "observed_gradient"]
