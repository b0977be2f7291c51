"""DP-FedAvg's settings, each checked on its own before anything trains (one line per refusal)."""
from __future__ import annotations

import math

from privbench.defenses.client_dp.accountant import ACCOUNTANTS
from privbench.errors import ConfigError

MODES = ("central", "local")


def _positive(key: str, value: object, *, zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not (value >= 0 if zero else value > 0):
        raise ConfigError(f"aggregation.{key}={value!r}: must be a finite number {'>=' if zero else '>'} 0")
    return float(value)


def checked(*, mode: str, clip: float, noise_multiplier: float | None, target_epsilon: float | None, delta: float,
            accountant: str, adaptive: bool, budget: float | None, canary_clients: int,
            canary_scale: float) -> dict[str, object]:
    """The settings as given, once each is one an accountant can account for.

    Example:
        >>> checked(mode="global", clip=1.0, noise_multiplier=1.0, target_epsilon=None, delta=1e-5,
        ...         accountant="pld", adaptive=False, budget=None, canary_clients=0,
        ...         canary_scale=2.0)
        Traceback (most recent call last):
        ...
        privbench.errors.ConfigError: aggregation.mode='global': one of central, local
    """
    if mode not in MODES:
        raise ConfigError(f"aggregation.mode={mode!r}: one of {', '.join(MODES)}")
    if accountant not in ACCOUNTANTS:
        raise ConfigError(f"aggregation.accountant={accountant!r}: one of {', '.join(ACCOUNTANTS)}")
    _positive("clip", clip)
    if target_epsilon is None:
        if noise_multiplier is None:
            raise ConfigError("aggregation.noise_multiplier=null needs aggregation.target_epsilon to calibrate it")
        _positive("noise_multiplier", noise_multiplier, zero=True)
    else:
        _positive("target_epsilon", target_epsilon)
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ConfigError(f"aggregation.delta={delta!r}: must be in (0, 1)")
    if budget is not None:
        _positive("budget", budget)
    if adaptive and mode == "local":
        raise ConfigError("aggregation.adaptive=true needs mode=central: the clipped count is estimated by the "
                          "server (Flower's LocalDpMod clips at a fixed norm too)")
    if isinstance(canary_clients, bool) or not isinstance(canary_clients, int) or canary_clients < 0 \
            or canary_clients == 1:
        raise ConfigError(f"aggregation.canary_clients={canary_clients!r}: 0 (none) or a count >= 2")
    if canary_clients and not _positive("canary_scale", canary_scale) >= 1:
        raise ConfigError(f"aggregation.canary_scale={canary_scale!r}: at least 1 (a canary at or above the clip)")
    return {"mode": mode, "clip": clip}
