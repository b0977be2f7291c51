"""Gradient-inversion and projection attacks on recorded payloads."""
from privbench.attacks.base import Attack, AttackResult, Attempt, GradientInversion
from privbench.attacks.dlg import DLG
from privbench.attacks.idlg import IDLG
from privbench.attacks.ig import InvertingGradients
from privbench.attacks.labels import recover_labels
from privbench.attacks.none import NoAttack
from privbench.attacks.projection import SubspaceProjection
from privbench.attacks.target import AttackTarget, observed_gradient

__all__ = ["DLG", "IDLG", "Attack", "AttackResult", "AttackTarget", "Attempt", "GradientInversion",
           "InvertingGradients", "NoAttack", "SubspaceProjection", "observed_gradient", "recover_labels"]
