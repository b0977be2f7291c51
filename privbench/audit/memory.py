"""An attack's working set, estimated from its settings before anything is trained or allocated."""
from __future__ import annotations

import math
import os

from torch import nn

from privbench.errors import ConfigError

#: Share of the machine's free memory an attack's estimated working set may take.
MEMORY_SHARE = 0.5
#: Most local steps an unrolled attack replays (each keeps its weights and activations for the backward pass).
MAX_UNROLLED_STEPS = 10_000


def available_memory() -> int:
    """Bytes of memory this machine can give a process without swapping: ``MemAvailable`` of ``/proc/meminfo``
    (free pages and the page cache the kernel can reclaim), else the free pages; 0 when unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def inversion_bytes(*, problems: int, images: int, image_shape: tuple[int, ...], params: int, steps: int = 1,
                    batch: int | None = None) -> int:
    """Estimated bytes of a gradient inversion: per problem (restart x victim) its images, a copy of the weights
    and their gradients and Adam's two moments, in float32, times 4 for activations and autograd's buffers; an
    unrolled one also keeps every replayed step's weights and batch activations. An estimate, not a measurement.

    Example:
        >>> inversion_bytes(problems=1, images=1, image_shape=(1, 28, 28), params=100)
        40832
    """
    pixels = math.prod(image_shape)
    per_problem = images * pixels * 3 + params * 2
    if steps > 1:
        per_problem += steps * (params * 2 + (batch or images) * pixels * 4)
    return 4 * 4 * problems * per_problem


def check_memory(estimate: int, what: str, *, available: int | None = None) -> None:
    """Refuse ``what`` (the settings that set the working set, with their counts) when ``estimate`` bytes exceed
    ``MEMORY_SHARE`` of the free memory.

    Raises:
        ConfigError: naming ``what``, the estimate and the bound.
    """
    free = available_memory() if available is None else available
    if free and estimate > MEMORY_SHARE * free:
        raise ConfigError(f"{what} would need about {estimate / 2**30:.1f} GiB (estimated), more than half of the "
                          f"{free / 2**30:.1f} GiB this machine has free")


def check_unrolled_steps(steps: int, what: str) -> None:
    """An unrolled attack replays at most ``MAX_UNROLLED_STEPS`` local steps."""
    if steps > MAX_UNROLLED_STEPS:
        raise ConfigError(f"{what}: an unrolled attack would replay {steps:,} local steps, more than the "
                          f"{MAX_UNROLLED_STEPS:,} it can keep (the local training's epochs x batches)")


def working_set(attack: object, model: nn.Module, image_shape: tuple[int, ...]) -> tuple[int, str] | None:
    """The estimated bytes of the part of ``attack``'s working set its own size settings set, and those settings:
    LiRA's shadows (each a copy of the model, its gradients and momentum, trained at once), an imprint block's bins
    (two layers of ``bins x pixels`` weights in every client's training) and the label-count regression's shadow
    batches (one head-sized feature row each, in float64); None for an attack with no such setting."""
    params = sum(t.numel() for t in model.parameters())
    if hasattr(attack, "variant") and hasattr(attack, "shadows"):
        shadows = int(getattr(attack, "shadows"))
        return 4 * 4 * shadows * params, f"attack.shadows={shadows}: {shadows} shadow models of {params:,} weights"
    if hasattr(attack, "bins"):
        bins = int(getattr(attack, "bins"))
        return 4 * 4 * 2 * bins * math.prod(image_shape), f"attack.bins={bins}: an imprint block of {bins} bins"
    if hasattr(attack, "shadows") and hasattr(attack, "refits"):
        shadows = int(getattr(attack, "shadows"))
        head = [m for m in model.modules() if isinstance(m, nn.Linear)]
        row = sum(p.numel() for p in head[-1].parameters()) if head else params
        return 8 * 2 * shadows * row, f"attack.shadows={shadows}: {shadows} shadow batches of {row:,} features"
    return None


def check_working_set(attack: object, model: nn.Module, image_shape: tuple[int, ...]) -> None:
    """Refuse ``attack`` when the working set its settings set (``working_set``) exceeds the memory bound."""
    found = working_set(attack, model, image_shape)
    if found is not None:
        check_memory(found[0], found[1])
