"""GENE-FL's nested settings: learnGene condensation (``fl.gene.*``) and agnostic clients (``fl.agnostic.*``)."""
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


@dataclass(frozen=True)
class AgnosticSettings:
    """Agnostic clients' fine-tuning budget, and whether to train a FedAvg reference to compare.

    ``samples`` limits fine-tuning to that many of the client's images (0: all of them),
    the few-shot regime in which an initialisation matters.
    """

    epochs: int = 1
    lr: float = 0.05
    batch_size: int = 32
    samples: int = 0
    fedavg_reference: bool = True

    def __post_init__(self) -> None:
        if self.epochs < 0 or self.lr <= 0 or self.batch_size < 1 or self.samples < 0:
            raise ConfigError("fl.agnostic: epochs and samples must be >= 0, lr > 0, batch_size >= 1")
