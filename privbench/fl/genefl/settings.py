"""GENE-FL's nested settings: learnGene condensation (``fl.gene.*``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from privbench.errors import ConfigError
from privbench.fl.genefl.learngene import SCORES, SELECTS
from privbench.schema import Gamma, Switch

BUDGETS = ("layers", "size")


@dataclass(frozen=True)
class GeneSettings:
    """learnGene condensation: layers chosen by ``select`` on ``score`` until ``gamma`` is reached.

    Attributes:
        gamma: with ``budget=layers`` a count (>= 1) or a fraction (< 1) of the layers; with
            ``budget=size`` a fraction in (0, 1] of the model's elements (layers are taken in
            ``select`` order until they hold it).
        select: ``top`` | ``bottom`` | ``random``.
        score: ``cos_per_dim`` (Eq. 9) | ``cos`` | ``update_norm``.
        budget: ``layers`` | ``size``.
        adaptive: each client moves its own gamma by ``step`` every round on the accuracy of the
            model it received (``adapt_gamma``), within ``[gamma_min, gamma_max]``; gamma is then
            a fraction (of layers or of size).
        step, gamma_min, gamma_max, tolerance: the adaptive rule's settings.
    """

    gamma: Annotated[float, Gamma()] = 0.5
    select: str = "top"
    score: str = "cos_per_dim"
    budget: str = "layers"
    adaptive: Switch = False
    step: float = 0.05
    gamma_min: float = 0.05
    gamma_max: float = 1.0
    tolerance: float = 0.0

    def __post_init__(self) -> None:
        if self.gamma <= 0:
            raise ConfigError(f"fl.gene.gamma must be > 0, got {self.gamma}")
        if self.select not in SELECTS:
            raise ConfigError(f"fl.gene.select={self.select!r} is not one of {', '.join(SELECTS)}")
        if self.score not in SCORES:
            raise ConfigError(f"fl.gene.score={self.score!r} is not one of {', '.join(SCORES)}")
        if self.budget not in BUDGETS:
            raise ConfigError(f"fl.gene.budget={self.budget!r} is not one of {', '.join(BUDGETS)}")
        if self.budget == "size" and self.gamma > 1:
            raise ConfigError(f"fl.gene.gamma={self.gamma} must be a fraction in (0, 1] with fl.gene.budget=size")
        if self.adaptive:
            if self.budget == "layers" and self.gamma >= 1:
                raise ConfigError(f"fl.gene.adaptive=true moves a fraction; fl.gene.gamma={self.gamma} is a layer "
                                  "count (give a fraction < 1, or fl.gene.budget=size)")
            if not 0 < self.gamma_min <= self.gamma <= self.gamma_max <= 1:
                raise ConfigError(f"fl.gene.adaptive needs 0 < gamma_min <= gamma <= gamma_max <= 1, got "
                                  f"{self.gamma_min}, {self.gamma}, {self.gamma_max}")
            if not self.step > 0 or self.tolerance < 0:
                raise ConfigError(f"fl.gene.step must be > 0 and fl.gene.tolerance >= 0, got {self.step}, "
                                  f"{self.tolerance}")
