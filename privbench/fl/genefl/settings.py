"""GENE-FL's nested settings: learnGene condensation (``fl.gene.*``)."""
from __future__ import annotations

from dataclasses import dataclass

from privbench.errors import ConfigError
from privbench.fl.genefl.learngene import SCORES, SELECTS


@dataclass(frozen=True)
class GeneSettings:
    """learnGene condensation: ``gamma`` layers (count >= 1 or fraction < 1) chosen by ``select`` on ``score``."""

    gamma: float = 0.5
    select: str = "top"
    score: str = "cos_per_dim"

    def __post_init__(self) -> None:
        if self.gamma <= 0:
            raise ConfigError(f"fl.gene.gamma must be > 0, got {self.gamma}")
        if self.select not in SELECTS:
            raise ConfigError(f"fl.gene.select={self.select!r} is not one of {', '.join(SELECTS)}")
        if self.score not in SCORES:
            raise ConfigError(f"fl.gene.score={self.score!r} is not one of {', '.join(SCORES)}")
