"""Gradient-inversion attacks on recorded payloads."""
from attacks.base import Attack, AttackResult, Attempt
from attacks.dlg import DLG
from attacks.idlg import IDLG
from attacks.labels import recover_labels
from attacks.target import AttackTarget, observed_gradient

__all__ = ["DLG", "IDLG", "Attack", "AttackResult", "AttackTarget", "Attempt", "observed_gradient", "recover_labels"]
