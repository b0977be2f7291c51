"""The membership ladder: every record-level test of this family on one message, in one run, from one set of
reference models, so their figures share candidates, references and seed.

Rungs, weakest knowledge first: the loss (Yeom et al., 2018), the loss change and the gradient alignment
(``attacks.membership.record``), then at each count ``k`` of ``references``: LiRA offline and online (Carlini et al.,
2022; ``attacks.membership.lira``) and RMIA offline and online (Zarifzadeh et al., 2024; ``attacks.membership.rmia``)
on the first ``k`` of ``max(references)`` offline and ``max(references)`` online shadow client-rounds, trained once.
LiRA fits one variance for all records below 64 references (the paper's advice; online: below 32 on each side of
every candidate) and needs two references (offline) or a reference with and one without every candidate (online),
as online RMIA does; a rung that cannot run is listed with its reason.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import torch

from privbench.attacks.membership.findings import LadderScores
from privbench.attacks.membership.lira import Confidences, LiRA, likelihood_ratio, offline_score
from privbench.attacks.membership.record import TESTS, MembershipInference
from privbench.attacks.membership.rmia import rmia_scores
from privbench.attacks.membership.views import MembershipView
from privbench.errors import AttackNotApplicableError
from privbench.schema import Candidates, Count, Fraction, IntList, Positive, ScoringBatch

#: The reference-based tests of the ladder, each run at every count of references.
CALIBRATED = ("lira_offline", "lira_online", "rmia_offline", "rmia_online")
#: Below this many references LiRA pools its variance over records.
PER_RECORD_VARIANCE = 64


def rung_name(test: str, references: int | None) -> str:
    """A rung's name: ``loss`` or ``rmia_online@8``."""
    return test if references is None else f"{test}@{references}"


class MembershipLadder(LiRA):
    """Score every candidate of a ``MembershipView`` with each test of the family (module docstring).

    Args:
        references: the counts of reference models the calibrated tests run at (the largest is trained).
        headline: the rung whose scores are the run's membership figures (``rmia_online@64``).
        non_members: non-members in the game (at least the members' count; the membership game fills those beyond
            the class-matched test records with train records no model trained on).
        population: population records RMIA compares each candidate with.
        gamma, offline_a: RMIA's.
        max_candidates: twice the most members; batch_size: records scored at once.
    """

    name = "mia_ladder"

    def __init__(self, *, references: Annotated[Sequence[int], IntList(low=1, high=10**5)] = (1, 2, 4, 8, 64),
                 headline: str = "rmia_online@64", non_members: Count = 2000, population: Count = 1000,
                 gamma: Positive = 1.0, offline_a: Fraction = 0.3, max_candidates: Candidates = 1000,
                 batch_size: ScoringBatch = 256) -> None:
        refs = sorted({int(k) for k in references})
        if not refs or min(refs) < 1:
            raise ValueError("attack.references must name at least one count of reference models, each >= 1")
        rungs = [*TESTS, *(rung_name(t, k) for t in CALIBRATED for k in refs)]
        if headline not in rungs:
            raise ValueError(f"attack.headline={headline!r}: allowed {', '.join(rungs)}")
        super().__init__(variant="online", shadows=max(2, refs[-1]), max_candidates=max_candidates,
                         batch_size=batch_size)
        self.references, self.headline, self.non_members = refs, headline, int(non_members)
        self.population, self.gamma, self.offline_a = int(population), float(gamma), float(offline_a)

    def budget(self) -> dict[str, Any]:
        return {"tests": [*TESTS, *CALIBRATED], "references": self.references,
                "shadows": f"{self.shadows} offline and {self.shadows} online client-rounds, trained once; rung k "
                           "reads the first k",
                "variance": f"LiRA: pooled over records below {PER_RECORD_VARIANCE} references (online: below "
                            f"{PER_RECORD_VARIANCE // 2} on a side of some candidate), per record from there",
                "shadow_training": "the victim's declared local training, from the weights it started from",
                "queries": "the record alone (no augmentations)", "non_members": self.non_members,
                "population_z": self.population, "gamma": self.gamma, "offline_a": self.offline_a,
                "headline": self.headline}

    def attack(self, view: MembershipView, *, seed: int) -> LadderScores:
        """Every rung's scores, in the pool's order; the headline rung's are the finding's ``scores``."""
        m = len(view.candidates)
        rungs: dict[str, torch.Tensor] = {}
        skipped: dict[str, str] = {}
        for test in TESTS:
            try:
                single = MembershipInference(test=test, max_candidates=self.max_candidates, batch_size=self.batch_size)
                rungs[test] = single.attack(view, seed=seed).scores.double().cpu()
            except AttackNotApplicableError as exc:
                skipped[test] = str(exc)
        scored = {variant: LiRA(variant=variant, shadows=self.shadows, max_candidates=self.max_candidates,
                                batch_size=self.batch_size).confidences(view, seed=seed, population=self.population)
                  for variant in ("offline", "online")}
        for k in self.references:
            for calibrated in CALIBRATED:
                try:
                    rungs[rung_name(calibrated, k)] = self._rung(calibrated, k, scored[calibrated.split("_")[1]],
                                                                 m).cpu()
                except AttackNotApplicableError as exc:
                    skipped[rung_name(calibrated, k)] = str(exc)
        if self.headline not in rungs:
            raise AttackNotApplicableError(f"attack.headline={self.headline} could not run: {skipped[self.headline]}")
        info = {"test": f"mia_ladder ({self.headline})", "rungs": list(rungs), **scored["online"].info,
                "population_z": int(len(scored["online"].target) - m)}
        return LadderScores(scores=rungs[self.headline], candidates=list(range(m)), info=info, rungs=rungs,
                            skipped=skipped)

    def _rung(self, test: str, k: int, scored: Confidences, m: int) -> torch.Tensor:
        """One calibrated test's scores from the first ``k`` references."""
        target, refs = scored.target, scored.shadows[:k]
        if test.startswith("rmia"):
            if len(target) == m:
                raise AttackNotApplicableError("RMIA found no population records to compare the candidates with")
            return rmia_scores(torch.sigmoid(target), torch.sigmoid(refs), scored.inside[:k]
                               if test == "rmia_online" else None, candidates=m, gamma=self.gamma,
                               offline_a=self.offline_a)
        if k < 2:
            raise AttackNotApplicableError("LiRA fits a Gaussian to the references' confidences: it needs two")
        if test == "lira_offline":
            return offline_score(target[:m], refs[:, :m], fixed_variance=k < PER_RECORD_VARIANCE)
        inside = scored.inside[:k]
        if not (inside.any(0) & (~inside).any(0)).all():
            covered = int((inside.any(0) & (~inside).any(0)).sum())
            raise AttackNotApplicableError(f"online LiRA needs a reference with and one without every candidate; "
                                           f"{k} references cover {covered} of {m}")
        fewest = int(torch.minimum(inside.sum(0), (~inside).sum(0)).min())  # per side: half of 64 in the paper
        return likelihood_ratio(target[:m], refs[:, :m], inside, fixed_variance=fewest < PER_RECORD_VARIANCE // 2)
