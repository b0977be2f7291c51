"""Membership figures: record membership (AUC, TPR at low FPR with intervals), the game's size, source inference."""
from __future__ import annotations

from privbench.figures.spec import privacy

MIA_AUC = privacy("mia_auc", "membership AUC", fmt="{:.3f}", leak="higher", bounds="unit")
MIA_TPR_1 = privacy("mia_tpr_at_fpr_1pct", "membership TPR at FPR 1 %", fmt="{:.3f}", leak="higher", bounds="unit")
MIA_TPR_01 = privacy("mia_tpr_at_fpr_0_1pct", "membership TPR at FPR 0.1 %", fmt="{:.3f}", leak="higher",
                      bounds="unit")
#: A membership game whose candidates differ in class (participation: clients): the same test on records that carry
#: only the class (the informed chance; class-matched games need none).
MIA_AUC_INFORMED = privacy("mia_auc_informed", "membership AUC knowing only the classes", fmt="{:.3f}", bounds="unit")
MIA_TPR_1_INFORMED = privacy("mia_tpr_at_fpr_1pct_informed", "membership TPR at FPR 1 % knowing only the classes",
                              fmt="{:.3f}", bounds="unit")
#: Source inference (which client holds a record?): its accuracy, 1 / clients, and a prior that knows the clients'
#: classes (uniform over the clients holding the record's class).
SOURCE_ACCURACY = privacy("source_accuracy", "source inference accuracy", fmt="{:.3f}", leak="higher", bounds="unit")
SOURCE_CHANCE = privacy("source_chance", "source chance (1 / clients)", fmt="{:.3f}", bounds="unit")
SOURCE_CHANCE_INFORMED = privacy("source_chance_informed", "source chance knowing the clients' classes", fmt="{:.3f}",
                                  bounds="unit")
MIA_MEMBERS = privacy("mia_members", "membership game: members", fmt="{}", bounds="nonnegative")
MIA_NON_MEMBERS = privacy("mia_non_members", "membership game: non-members", fmt="{}", bounds="nonnegative")
