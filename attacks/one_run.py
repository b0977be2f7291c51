"""The auditor's side of a one-run DP audit (Steinke, Nasr and Jagielski, 2023), white-box with Dirac canaries.

Each canary's gradient is a Dirac on its own coordinate (clipped to ``C``), so an included canary moves that
coordinate of the uploaded model by ``-lr C / B`` each step it is sampled in, and an excluded one leaves only the noise and the
real data's gradient there; a coordinate the upload does not carry scores 0. The score is the coordinate's descent, ``-(theta_after - theta_before)``; the
``guesses`` highest are guessed in, the ``guesses`` lowest out. The evaluator turns the right guesses into a lower
bound on epsilon (``metrics.one_run``).
"""
from __future__ import annotations

from typing import Any, ClassVar

import torch

from privbench.attacks.base import Attack
from privbench.attacks.findings import CanaryScores
from privbench.payloads.kinds import Carries


class OneRunAudit(Attack):
    """Score each canary from the victim's update and guess ``guesses`` in and ``guesses`` out.

    Args:
        canaries: how many canaries the auditor designs (each included with probability 1/2).
        guesses: how many it guesses each way (at most half the canaries).
        confidence: the confidence of the epsilon lower bound.
    """

    name: ClassVar[str] = "one_run"
    reads: ClassVar[frozenset[Carries]] = frozenset({"model"})
    view = "canaries"

    def __init__(self, *, canaries: int = 10000, guesses: int = 100, confidence: float = 0.95) -> None:
        if canaries < 2 or not 1 <= guesses <= canaries // 2:
            raise ValueError("attack.canaries must be >= 2 and attack.guesses in [1, canaries / 2]")
        if not 0 < confidence < 1:
            raise ValueError("attack.confidence must be in (0, 1)")
        self.canaries, self.guesses, self.confidence = canaries, guesses, confidence

    def attack(self, view: Any, *, seed: int) -> CanaryScores:
        """One score per canary: the descent of its coordinate in the victim's update (0 for a coordinate the upload
        does not carry: a learnGene layer the client did not send)."""
        scores = torch.tensor([-float(view.change[name].flatten()[index]) if name in view.change else 0.0
                               for name, index in view.coordinates])
        return CanaryScores(info={"test": "dirac_canaries", "confidence": self.confidence}, scores=scores,
                            candidates=list(range(len(scores))), guesses=self.guesses)
