"""SecAgg+'s settings, checked as Flower 1.42's ``SecAggPlusWorkflow`` reads them: share counts and thresholds (an
integer 1 is the share 1.0), and, for the cohorts a run will have, a threshold no cohort could meet or sums that
would wrap around the modulus, refused before training."""
from __future__ import annotations

from collections.abc import Sequence

from privbench.errors import ConfigError


def checked_settings(*, num_shares: int | float, reconstruction_threshold: int | float, clipping_range: float,
                     quantization_range: int, modulus_range: int, max_weight: float) -> tuple[int | float, int | float]:
    """The share count and threshold as Flower reads them, after every setting is checked on its own."""
    for key, value in (("num_shares", num_shares), ("reconstruction_threshold", reconstruction_threshold)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(f"aggregation.{key}={value!r}: a count (int) or a share of the cohort (float) > 0")
    # Flower's semantics: an integer 1 is the share 1.0 (every client; for the threshold, every share)
    num_shares = 1.0 if num_shares == 1 else num_shares
    reconstruction_threshold = 1.0 if reconstruction_threshold == 1 else reconstruction_threshold
    if isinstance(num_shares, int) and num_shares < 3:
        raise ConfigError(f"aggregation.num_shares={num_shares}: an integer count must be >= 3 (or 1.0: every client)")
    if isinstance(num_shares, float) and num_shares > 1:
        raise ConfigError(f"aggregation.num_shares={num_shares}: a share of the cohort is at most 1.0")
    if isinstance(reconstruction_threshold, float) and reconstruction_threshold > 1:
        raise ConfigError(f"aggregation.reconstruction_threshold={reconstruction_threshold}: a share is at most 1.0")
    if isinstance(num_shares, int) and isinstance(reconstruction_threshold, int) and \
            not 2 <= reconstruction_threshold < num_shares:
        raise ConfigError(f"aggregation.reconstruction_threshold={reconstruction_threshold}: must be in 2.."
                          f"{num_shares - 1} (below num_shares)")
    if not clipping_range > 0:
        raise ConfigError(f"aggregation.clipping_range={clipping_range}: must be > 0")
    if isinstance(quantization_range, bool) or not isinstance(quantization_range, int) or quantization_range < 2:
        raise ConfigError(f"aggregation.quantization_range={quantization_range!r}: an integer >= 2")
    if (isinstance(modulus_range, bool) or not isinstance(modulus_range, int) or modulus_range > 2**32
            or modulus_range <= quantization_range or modulus_range & (modulus_range - 1)):
        raise ConfigError(f"aggregation.modulus_range={modulus_range!r}: a power of 2 above quantization_range, "
                          "at most 2^32")
    if not max_weight > 0:
        raise ConfigError(f"aggregation.max_weight={max_weight}: must be > 0")
    if isinstance(num_shares, int) and num_shares > modulus_range // quantization_range:
        raise ConfigError(f"aggregation.num_shares={num_shares}: above modulus_range / quantization_range = "
                          f"{modulus_range // quantization_range}, the sums would overflow the modulus (Flower "
                          "refuses it too)")
    return num_shares, reconstruction_threshold


def cohort_sizes(num_shares: int | float, threshold_setting: int | float, n: int) -> tuple[int, int]:
    """Shares per secret (a client's neighbours, itself included) and the threshold for a cohort of ``n``
    (Flower's rules); ``ConfigError`` where no secret of the cohort could be rebuilt (Flower halts there)."""
    if isinstance(num_shares, float):
        shares = round(num_shares * n)
        if shares < n and shares % 2 == 0:
            shares += 1
        if shares <= 2:
            shares = n
    else:
        shares = int(num_shares)  # Flower takes an integer count as it is (its threshold's share of it)
    if isinstance(threshold_setting, float):
        threshold = max(round(threshold_setting * shares), 2)
    else:
        threshold = int(threshold_setting)
    neighbours = min(2 * (shares // 2) + 1, n)  # the ring's places around a client (itself included)
    if threshold > neighbours:  # Flower halts such a cohort ("insufficient available nodes")
        raise ConfigError(f"aggregation.reconstruction_threshold={threshold_setting}: {threshold} shares for a cohort "
                          f"of {n}, whose clients hold {neighbours} shares each; no secret could be rebuilt")
    return neighbours, threshold


def check_cohorts(num_shares: int | float, threshold_setting: int | float, *, levels: int, modulus: int,
                  max_weight: float, sizes: Sequence[int], weights: Sequence[int]) -> None:
    """Refuse, before training, settings that break SecAgg+ for a cohort of any of ``sizes`` clients (clients of
    ``weights`` samples): a threshold above a cohort's shares, and sums that overflow the modulus (each client
    adds up to ``quantization_range`` a coordinate, and ``round(num_samples / max_weight * quantization_range)``
    as its weight), which would wrap around without a word."""
    cohorts = [n for n in sizes if n >= 2]
    if not cohorts:
        return
    largest = max(cohorts)
    if largest * levels >= modulus:
        raise ConfigError(f"aggregation.quantization_range={levels}: a cohort of {largest} clients sums up to "
                          f"{largest} x {levels}, which overflows modulus_range={modulus}; use "
                          f"quantization_range < {modulus // largest} or a larger modulus")
    heaviest = sum(sorted(weights, reverse=True)[:largest])
    if round(heaviest / max_weight * levels) >= modulus:
        raise ConfigError(f"aggregation.max_weight={max_weight:g}: a cohort of {largest} clients weighs "
                          f"{heaviest} samples, {heaviest / max_weight:.3g} x quantization_range in all, which "
                          f"overflows modulus_range={modulus}; use max_weight > "
                          f"{heaviest * levels / modulus:.6g}")
    for n in cohorts:
        cohort_sizes(num_shares, threshold_setting, n)
