"""The claim a one-run DP audit tests: the accountant's epsilon for the audited round's releases with the f-DP bound
on a canary test's TPR, and the audit's guesses read through f-DP against the round's own family of curves."""
from __future__ import annotations

import math
from typing import Any

from privbench.defenses.calibration import epsilon, events
from privbench.defenses.tradeoff import blow_up_inverse, releases_epsilon, tpr_bound
from privbench.figures import EPSILON_LOWER_FDP, EPSILON_TIGHT
from privbench.fl.reads import LOCAL_SGD, PlannedRead
from privbench.metrics.one_run_fdp import gdp_blow_up_inverse, gdp_epsilon, largest_rejected
from privbench.payloads import LocalTraining

#: The FPRs of the audited round's f-DP bound on a canary test's TPR.
BOUND_FPRS = (0.01, 0.001)


def round_claim(record: LocalTraining, sigma: float, *, delta: float, accountant: str
                ) -> tuple[float, float, list[float]]:
    """What the accountant claims for a round of local DP-SGD: its epsilon at ``delta`` (inf without noise), its
    Poisson rate, and the f-DP bound on a membership test's TPR at ``BOUND_FPRS``."""
    schedule = events([PlannedRead(LOCAL_SGD, record.num_samples, record.batch_size, record.epochs)])
    [(rate, _)] = schedule
    claimed = epsilon(sigma, schedule, delta=delta, accountant=accountant) if sigma > 0 else float("inf")
    return claimed, rate, tpr_bound([(sigma, rate, record.steps)], BOUND_FPRS)


#: delta at which the f-DP bound is stated when the audited round claims none (a trainer without noise).
FDP_DELTA = 1e-5


def fdp_bound(knowledge: dict[str, Any], m: int, guesses: int, right: int, *, confidence: float) -> dict[str, Any]:
    """The one-run audit read through f-DP (Mahloujifar et al. 2025): the least private curve of the round's own
    family the guesses refute, as epsilon at the round's delta, beside the round's tight epsilon (its privacy loss
    distribution). The family is the round's releases at a scaled noise multiplier; at Poisson rate 1 they are
    exactly mu-GDP (``mu = sqrt(steps) / sigma``), tested as such."""
    sigma, rate, steps = (float(knowledge.get("sigma", 0.0)), float(knowledge.get("sample_rate", 1.0)),
                          int(knowledge.get("steps", 1)))
    delta = float(knowledge.get("delta") or FDP_DELTA)
    tau = 1.0 - confidence
    if sigma <= 0 or rate >= 1:  # mu-GDP (any curve at all for a round without noise)
        mu = largest_rejected(gdp_blow_up_inverse, m, guesses, right, tau=tau)
        bound, family = gdp_epsilon(mu, delta=delta), "mu-GDP"
        tight = gdp_epsilon(math.sqrt(steps) / sigma, delta=delta) if sigma > 0 else math.inf
        found = {"fdp_mu": mu}
    else:  # the round's subsampled releases at noise 1 / t: t grows as the curve grows less private
        t = largest_rejected(lambda t: blow_up_inverse([(1.0 / t, rate, steps)]), m, guesses, right, tau=tau,
                             high=16.0, tol=1e-4)
        bound = releases_epsilon([(1.0 / t, rate, steps)], delta) if t > 0 else 0.0
        tight, family = releases_epsilon([(sigma, rate, steps)], delta), f"{steps} Gaussian releases at rate {rate:g}"
        found = {"fdp_noise_multiplier": 1.0 / t if t > 0 else math.inf}
    return {EPSILON_LOWER_FDP.key: bound, EPSILON_TIGHT.key: tight, "fdp_family": family,
            "fdp_delta": delta, **found}
