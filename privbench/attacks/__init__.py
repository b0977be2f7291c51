"""Attacks on recorded payloads: the contract (views in, findings out), gradient inversion, projection."""
from privbench.attacks.base import ActiveAttack, Attack, Attempt, GradientInversion
from privbench.attacks.class_set import SubspaceClassSet
from privbench.attacks.dlg import DLG
from privbench.attacks.fedavg_inversion import FedAvgInversion
from privbench.attacks.findings import (
    CanaryScores,
    Finding,
    InferredLabels,
    InferredProperty,
    MembershipScores,
    Reconstruction,
    SourceGuesses,
)
from privbench.attacks.idlg import IDLG
from privbench.attacks.ig import InvertingGradients
from privbench.attacks.imprint import ImprintAttack
from privbench.attacks.label_counts import LabelCounts
from privbench.attacks.labels import recover_labels
from privbench.attacks.lira import LiRA
from privbench.attacks.membership import MembershipInference
from privbench.attacks.none import NoAttack
from privbench.attacks.one_run import OneRunAudit
from privbench.attacks.participation import ParticipationInference
from privbench.attacks.projection import SubspaceProjection
from privbench.attacks.rmia import RMIA
from privbench.attacks.source import SourceInference
from privbench.attacks.target import AttackTarget, observed_gradient
from privbench.attacks.trap_weights import TrapWeightsAttack
from privbench.attacks.views import (
    ActiveView,
    BasisView,
    CanaryView,
    CohortView,
    GradientView,
    LabelView,
    MembershipView,
    ModelView,
    ParticipationRound,
    ParticipationView,
    SourceView,
    View,
)

__all__ = ["SourceGuesses", "SourceInference", "SourceView", "DLG", "IDLG", "ActiveAttack", "FedAvgInversion", "ActiveView", "Attack", "CanaryScores", "CanaryView", "OneRunAudit", "AttackTarget", "Attempt", "BasisView", "CohortView", "Finding", "GradientInversion",
           "GradientView", "ImprintAttack", "InferredLabels", "InferredProperty", "InvertingGradients", "LabelCounts", "LabelView", "LiRA",
           "MembershipInference", "MembershipScores",
           "MembershipView", "ModelView",
           "NoAttack", "ParticipationInference", "ParticipationRound", "ParticipationView", "RMIA", "Reconstruction", "SubspaceClassSet", "SubspaceProjection", "TrapWeightsAttack", "View", "observed_gradient", "recover_labels"]
