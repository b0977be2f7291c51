"""Gradient-inversion and projection attacks on recorded payloads."""
from attacks.base import Attack, AttackResult, Attempt, GradientInversion
from attacks.dlg import DLG
from attacks.idlg import IDLG
from attacks.ig import InvertingGradients
from attacks.labels import recover_labels
from attacks.none import NoAttack
from attacks.projection import SubspaceProjection
from attacks.target import AttackTarget, observed_gradient

__all__ = ["DLG", "IDLG", "Attack", "AttackResult", "AttackTarget", "Attempt", "GradientInversion",
           "InvertingGradients", "NoAttack", "SubspaceProjection", "observed_gradient", "recover_labels"]
