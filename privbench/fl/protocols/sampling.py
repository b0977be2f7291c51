"""Who takes part in a round: a seeded draw of the cohort, with the audited clients swapped in on their round."""
from __future__ import annotations

import numpy as np

from privbench.victim import Victim


def draw_participants(round_: int, num_clients: int, *, participants: int, seed: int, victim: Victim,
                      rate: float | None = None) -> list[int]:
    """Participants of ``round_``, drawn from ``np.random.default_rng([seed, round_])``.

    Fixed-size (``rate`` None): ``participants`` clients without replacement, and a missing victim replaces the last
    drawn client that is not a victim. Poisson: each client joins at ``rate``, and the victims join their round
    besides (the audit's worst case).
    """
    rng = np.random.default_rng([seed, round_])
    if rate is not None:
        joins = rng.random(num_clients) < rate
        drawn = {int(c) for c in np.flatnonzero(joins)}
        return sorted(drawn | (set(victim.listed) if round_ == victim.round else set()))
    chosen = [int(c) for c in rng.choice(num_clients, participants, replace=False)]
    if round_ == victim.round:
        for v in victim.listed:
            if v not in chosen:
                spare = max(i for i, c in enumerate(chosen) if c not in victim.listed)
                chosen[spare] = v
    return sorted(chosen)
