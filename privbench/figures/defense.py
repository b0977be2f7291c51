"""Defence figures: the victim's epsilon as accounted, the f-DP bound of its releases, client-level DP."""
from __future__ import annotations

from privbench.figures.spec import Figure

#: The victim's epsilon: inf when a read of its data is released with no accounted mechanism (``defense.cover``);
#: what its accountant recorded is ``epsilon_accounted`` either way.
EPSILON = Figure("epsilon", "defense", "victim epsilon", fmt="{:.2f}", bounds="nonnegative")
EPSILON_ACCOUNTED = Figure("epsilon_accounted", "defense", "victim epsilon, accounted releases only", fmt="{:.2f}",
                           bounds="nonnegative")
EPSILON_MAX = Figure("epsilon_max", "defense", "largest epsilon", fmt="{:.2f}", bounds="nonnegative")
#: Client-level DP (``aggregation=dpfedavg``): the accountant's epsilon over the rounds run (add/remove one client),
#: and what canary clients measured of the mechanism in the same run (a lower bound of it, with its interval).
CLIENT_EPSILON = Figure("client_epsilon", "defense", "client-level epsilon (claimed)", fmt="{:.2f}", bounds="nonnegative")
CLIENT_EPSILON_CANARY = Figure("client_epsilon_canary", "defense", "client-level epsilon (canary clients)", fmt="{:.2f}",
                               bounds="nonnegative")
#: The f-DP bound of the victim's DP-SGD releases: the highest membership TPR any test can reach at that FPR.
MIA_TPR_BOUND_1 = Figure("mia_tpr_bound_1pct", "defense", "TPR bound at FPR 1 % (f-DP)", fmt="{:.3f}", bounds="unit")
MIA_TPR_BOUND_01 = Figure("mia_tpr_bound_0_1pct", "defense", "TPR bound at FPR 0.1 % (f-DP)", fmt="{:.3f}",
                          bounds="unit")
