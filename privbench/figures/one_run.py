"""One-run DP audit figures: the empirical epsilon lower bounds, the claims they test, the canary test's f-DP bound."""
from __future__ import annotations

from privbench.figures.spec import privacy

#: A one-run DP audit (Steinke et al. 2023): its lower bound on epsilon at its confidence, and the claim it tests.
EPSILON_LOWER = privacy("epsilon_lower_bound", "empirical epsilon (one-run lower bound)", fmt="{:.2f}",
                         bounds="nonnegative")
EPSILON_CLAIMED = privacy("epsilon_claimed", "claimed epsilon (audited round)", fmt="{:.2f}", bounds="nonnegative")
#: The same run read through f-DP (Mahloujifar et al. 2025), and the round's tight epsilon (its privacy loss
#: distribution) it is measured against.
EPSILON_LOWER_FDP = privacy("epsilon_lower_bound_fdp", "empirical epsilon (one-run f-DP lower bound)", fmt="{:.2f}",
                             bounds="nonnegative")
EPSILON_TIGHT = privacy("epsilon_claimed_tight", "tight epsilon (audited round, PLD)", fmt="{:.2f}",
                         bounds="nonnegative")
#: The audited round's f-DP bound: the highest TPR any test of one canary (one record) can reach against its releases.
CANARY_TPR_BOUND_1 = privacy("canary_tpr_bound_1pct", "TPR bound at FPR 1 % (audited round, f-DP)", fmt="{:.3f}",
                             bounds="unit")
CANARY_TPR_BOUND_01 = privacy("canary_tpr_bound_0_1pct", "TPR bound at FPR 0.1 % (audited round, f-DP)",
                              fmt="{:.3f}", bounds="unit")
