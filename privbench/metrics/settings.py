"""The ``metrics`` section of a run's config: how rebuilt images are scored, with each key's range."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated

from privbench.schema import Number, Switch


@dataclass(frozen=True)
class ScoringSettings:
    """How rebuilt images are scored (``metrics.*``).

    Attributes:
        lpips: also score LPIPS (AlexNet features; the weights ship with privbench).
        match_on: the cost of the Hungarian matching of a batch: ``mse``, ``ssim`` or ``lpips``
            (``metrics.reconstruction.MATCH_ON``).
        recovered_psnr, recovered_ssim: a true image counts as recovered when its matched reconstruction reaches
            both (``metrics.reconstruction.Recovered``).
    """

    lpips: Switch = True
    match_on: str = "mse"
    recovered_psnr: Annotated[float, Number(low=0, high=200)] = 20.0
    recovered_ssim: Annotated[float, Number(low=-1, high=1)] = 0.0


#: The keys the ``metrics`` section may carry.
METRIC_KEYS = frozenset(f.name for f in fields(ScoringSettings))
