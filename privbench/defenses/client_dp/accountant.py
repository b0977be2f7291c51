"""Client-level accounting of DP-FedAvg with Google's ``dp_accounting`` (PLD and RDP).

One round is one Gaussian release of the clipped updates' sum (central) or of each clipped update (local) with
noise multiplier ``z`` (noise std over clip norm), under add/remove-one-client adjacency. Where each client joins a
round by Poisson sampling at rate ``q`` the round is amplified by it; otherwise rounds compose in full, which holds
whichever data-independent rule picked the cohort (a client is charged only the rounds it joined).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from privbench.errors import ConfigError
from privbench.metrics.one_run_fdp import gdp_epsilon

if TYPE_CHECKING:
    import dp_accounting

ACCOUNTANTS = ("pld", "rdp")


@dataclass(frozen=True)
class ClientSchedule:
    """What a client's accountant composes: ``rounds`` Gaussian releases at multiplier ``noise_multiplier``, each
    joined at Poisson rate ``sample_rate`` (1.0: no amplification claimed)."""

    noise_multiplier: float
    rounds: int
    sample_rate: float = 1.0
    #: rounds beside ``rounds`` the client joined whatever the draw (an audited victim's): no amplification.
    unamplified: int = 0

    def event(self) -> "dp_accounting.DpEvent":
        """The ``dp_accounting`` event of the whole schedule (imported here: it brings absl's logging, which must not
        be set up at import time)."""
        import dp_accounting

        gaussian = dp_accounting.GaussianDpEvent(self.noise_multiplier)
        one: "dp_accounting.DpEvent" = gaussian
        if self.sample_rate < 1.0:
            one = dp_accounting.PoissonSampledDpEvent(self.sample_rate, gaussian)
        events = [dp_accounting.SelfComposedDpEvent(one, self.rounds)]
        if self.unamplified:
            events.append(dp_accounting.SelfComposedDpEvent(gaussian, self.unamplified))
        return dp_accounting.ComposedDpEvent(events)


def _tame_absl() -> None:
    """Point absl's log handler (built when ``dp_accounting`` first imports absl) at the process's own stderr: it
    binds whatever ``sys.stderr`` is at that moment (a test's capture, a redirected stream) and closes that stream
    when logging is configured again, as Hydra does at the start of every run."""
    import sys

    from absl import logging as absl_logging

    absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__


def fresh(accountant: str) -> "dp_accounting.PrivacyAccountant":
    """A new accountant by name (``pld`` or ``rdp``), add/remove-one adjacency."""
    from dp_accounting import pld, rdp

    _tame_absl()

    if accountant == "pld":
        return pld.PLDAccountant(value_discretization_interval=1e-4)
    if accountant == "rdp":
        return rdp.RdpAccountant()
    raise ConfigError(f"aggregation.accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}")


def epsilon(schedule: ClientSchedule, *, delta: float, accountant: str = "pld") -> float:
    """Epsilon at ``delta`` after ``schedule`` (0 for no rounds, inf without noise).

    Example:
        >>> round(epsilon(ClientSchedule(1.0, 1), delta=1e-5, accountant="pld"), 2)
        4.38
    """
    if schedule.rounds + schedule.unamplified == 0:
        return 0.0
    if schedule.noise_multiplier <= 0:
        return math.inf
    import logging

    acc = fresh(accountant)
    absl, root = logging.getLogger("absl"), logging.getLogger()
    level = absl.level
    absl.setLevel(logging.ERROR)  # RDP drops orders it cannot evaluate, with a warning each: the bound still holds
    # absl's log() calls logging.basicConfig() when the root logger has no handler, binding whatever sys.stderr is
    # then (a test's capture, later closed): a handler for the call's length keeps it from doing so
    guard = logging.NullHandler() if not root.handlers else None
    if guard is not None:
        root.addHandler(guard)
    try:
        acc.compose(schedule.event())
        return float(acc.get_epsilon(delta))
    finally:
        absl.setLevel(level)
        if guard is not None:
            root.removeHandler(guard)


def noise_for(target_epsilon: float, *, rounds: int, delta: float, sample_rate: float = 1.0,
              accountant: str = "pld") -> float:
    """The smallest noise multiplier whose ``rounds`` spend at most ``target_epsilon`` at ``delta``."""
    if target_epsilon <= 0:
        raise ConfigError(f"aggregation.target_epsilon must be > 0, got {target_epsilon}")

    def spent(z: float) -> float:
        return epsilon(ClientSchedule(z, rounds, sample_rate), delta=delta, accountant=accountant)

    low, high = 0.25, 1.0  # below ~0.25 a PLD's grid outgrows memory; no useful budget needs less noise
    if sample_rate == 1.0:  # unamplified rounds compose to one Gaussian: start from its exact multiplier
        exact = math.sqrt(rounds) / _gdp_mu(target_epsilon, delta=delta)
        low, high = max(low, 0.999 * exact), max(low, 1.02 * exact)
    if spent(low) <= target_epsilon:
        return low
    while spent(high) > target_epsilon:
        low, high = high, 2 * high
        if high > 1e4:
            raise ConfigError(f"aggregation.target_epsilon={target_epsilon} needs a noise multiplier above 1e4")
    while high - low > 2e-4 * high:  # bisection: high always spends at most the target
        mid = (low + high) / 2
        low, high = (mid, high) if spent(mid) > target_epsilon else (low, mid)
    z = high
    if z > 1e4:
        raise ConfigError(f"aggregation.target_epsilon={target_epsilon} needs a noise multiplier above 1e4 ({z:.4g})")
    return z


def rounds_within(budget: float, *, noise_multiplier: float, rounds: int, delta: float, sample_rate: float = 1.0,
                  accountant: str = "pld") -> int:
    """How many of ``rounds`` a client can join before its epsilon would pass ``budget`` (a budget stop)."""
    if noise_multiplier <= 0:
        return 0
    low, high = 0, rounds  # epsilon grows with rounds: the largest count within the budget, by bisection
    while low < high:
        mid = (low + high + 1) // 2
        if epsilon(ClientSchedule(noise_multiplier, mid, sample_rate), delta=delta, accountant=accountant) <= budget:
            low = mid
        else:
            high = mid - 1
    return low


def _gdp_mu(epsilon_: float, *, delta: float) -> float:
    """The mu whose mu-GDP spends ``epsilon_`` at ``delta`` (inverse of ``gdp_epsilon``)."""
    from scipy.optimize import brentq

    high = 1.0
    while gdp_epsilon(high, delta=delta) < epsilon_:
        high *= 2
    return float(brentq(lambda mu: gdp_epsilon(mu, delta=delta) - epsilon_, 1e-6, high, xtol=1e-12))
