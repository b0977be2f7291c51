"""The relative membership inference attack (RMIA, Zarifzadeh, Liu, Mireshghallah and Shokri, "Low-cost high-power
membership inference attacks", ICML 2024) on one client's model upload.

RMIA compares a candidate ``x`` with population records ``z`` through the target model ``theta`` and reference
models (here LiRA's shadow client-rounds, ``attacks.membership.lira``, trained from the weights the victim started
from):

    LR(x, z) = (p(x | theta) / p(x)) / (p(z | theta) / p(z)),    score(x) = share of z with LR(x, z) >= gamma

``p(. | theta)`` the probability of the record's label, ``p(x)`` its mean over the reference models. Online, each
candidate is in half the references and ``p(x)`` averages all of them (where a pool larger than two shadows hold
leaves fewer in than out, the average of the in and the out means, as the paper's half-and-half would give);
offline, the references never hold it and
``p(x) = ((1 + a) p_out(x) + (1 - a)) / 2`` stands in for the missing half (the paper's linear approximation, ``a``
set on its own held-out references; here a setting, ``offline_a``). ``z`` are test-split records of the candidates'
classes that no candidate is (the population LiRA's shadows are filled from).
"""
from __future__ import annotations

from typing import Any

import torch

from privbench.attacks.membership.findings import MembershipScores
from privbench.attacks.membership.lira import VARIANTS, LiRA, Variant
from privbench.attacks.membership.views import MembershipView
from privbench.errors import AttackNotApplicableError
from privbench.schema import Candidates, Iterations, ScoringBatch, Shadows


def rmia_scores(target: torch.Tensor, references: torch.Tensor, inside: torch.Tensor | None, *, candidates: int,
                gamma: float = 1.0, offline_a: float = 0.3) -> torch.Tensor:
    """RMIA's score of each candidate from label probabilities under the target (``[N]``) and the references
    (``[K, N]``): the first ``candidates`` records are scored against the rest (the population ``z``).
    ``inside`` (``[K, candidates]``): online references holding each candidate (None: offline); a candidate's
    ``p(x)`` is then the average of its in and out references' means (the mean of all where they are as many).

    Example:
        >>> target = torch.tensor([0.9, 0.5, 0.5, 0.5])  # one candidate the target fits, three population records
        >>> refs = torch.full((4, 4), 0.5)
        >>> rmia_scores(target, refs, None, candidates=1, offline_a=1.0).tolist()  # beats every z by 1.8 >= 1
        [1.0]
    """
    if inside is None:  # offline: the references are all out; the in half is approximated
        prior = ((1 + offline_a) * references.mean(0) + (1 - offline_a)) / 2
    else:  # online: p(x) weighs its in and out references alike, however many of each hold it
        held = inside.to(references.device, references.dtype)
        n_in, n_out = held.sum(0), (1 - held).sum(0)
        if (n_in < 1).any() or (n_out < 1).any():
            covered = int(((n_in >= 1) & (n_out >= 1)).sum())
            raise AttackNotApplicableError(f"online RMIA needs a reference with and one without every candidate; "
                                           f"{len(references)} references cover {covered} of {candidates}")
        refs = references[:, :candidates]
        halves = ((refs * held).sum(0) / n_in + (refs * (1 - held)).sum(0) / n_out) / 2
        prior = torch.cat([torch.where(n_in == n_out, refs.mean(0), halves), references[:, candidates:].mean(0)])
    ratio = target / prior.clamp_min(1e-30)
    x, z = ratio[:candidates], ratio[candidates:]
    if len(z) == 0:
        raise ValueError("RMIA needs population records to compare each candidate with")
    return (x.unsqueeze(1) / z.unsqueeze(0) >= gamma).double().mean(1)


class RMIA(LiRA):
    """Score every candidate of a ``MembershipView`` by RMIA against ``population`` population records.

    Args:
        variant: ``online`` (references with and without each candidate) or ``offline`` (references without).
        shadows: reference client-rounds (online: rounded up to an even number, complementary pairs).
        population: population records ``z`` each candidate is compared with.
        gamma: the pairwise likelihood-ratio threshold.
        offline_a: the offline approximation's ``a``.
        max_candidates, batch_size, complete, complete_steps: as LiRA's.
    """

    name = "rmia"

    def __init__(self, *, variant: Variant = "online", shadows: Shadows = 64, population: int = 1000,
                 gamma: float = 1.0, offline_a: float = 0.3, max_candidates: Candidates = 1000,
                 batch_size: ScoringBatch = 256, complete: str = "base", complete_steps: Iterations = 100) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"attack.variant={variant!r}: allowed {', '.join(VARIANTS)}")
        if population < 1 or not gamma > 0 or not 0 <= offline_a <= 1:
            raise ValueError("attack.population must be >= 1, attack.gamma > 0 and attack.offline_a in [0, 1]")
        super().__init__(variant=variant, shadows=shadows, max_candidates=max_candidates, batch_size=batch_size,
                         complete=complete, complete_steps=complete_steps)
        self.population, self.gamma, self.offline_a = population, gamma, offline_a

    def budget(self) -> dict[str, Any]:
        return {**super().budget(), "variance": "none (RMIA fits no Gaussian)", "population_z": self.population,
                "gamma": self.gamma, **({"offline_a": self.offline_a} if self.variant == "offline" else {})}

    def attack(self, view: MembershipView, *, seed: int) -> MembershipScores:
        """One score per candidate, in the pool's order: its share of population records it beats by ``gamma``."""
        scored = self.confidences(view, seed=seed, population=self.population)
        m = len(view.candidates)
        if len(scored.target) == m:
            raise ValueError("attack=rmia found no population records to compare the candidates with")
        probability = torch.sigmoid  # phi = log p / (1 - p)
        scores = rmia_scores(probability(scored.target), probability(scored.shadows),
                             scored.inside if self.variant == "online" else None, candidates=m, gamma=self.gamma,
                             offline_a=self.offline_a)
        return MembershipScores(scores=scores.cpu(), candidates=list(range(m)),
                                info={"test": f"rmia_{self.variant}", **scored.info,
                                      "population_z": len(scored.target) - m})
