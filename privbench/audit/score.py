"""The evaluator: each family of finding scored against the ground truth and its chance level.

Scorers are registered per finding type (``register_scorer``); a new attack family adds its finding
type and one scorer, and the attack phase needs no change (``docs/extending.md``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from privbench.attacks.base import Attack
from privbench.attacks.findings import Finding
from privbench.attacks.labels.findings import InferredLabels
from privbench.attacks.membership.findings import MembershipScores, SourceGuesses
from privbench.attacks.one_run.findings import CanaryScores
from privbench.attacks.property.findings import InferredProperty
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.audit.one_run import fdp_bound
from privbench.audit.output import write_gallery, write_grid, write_roc
from privbench.figures import (
    CANARY_TPR_BOUND_01,
    CANARY_TPR_BOUND_1,
    EPSILON_CLAIMED,
    EPSILON_LOWER,
    LABEL_ACCURACY,
    MIA_AUC,
    MIA_AUC_INFORMED,
    MIA_MEMBERS,
    MIA_NON_MEMBERS,
    MIA_TPR_01,
    MIA_TPR_1,
    MIA_TPR_1_INFORMED,
    NUM_RECONSTRUCTED,
    NUM_TRUE,
    PSNR_CHANCE,
    PSNR_MEAN,
    SOURCE_ACCURACY,
    SOURCE_CHANCE,
    SOURCE_CHANCE_INFORMED,
)
from privbench.metrics.chance import chance_baseline, gains
from privbench.metrics.labels import class_set_scores, label_scores, proportion_scores
from privbench.metrics.membership import auc, clopper_pearson, roc, tpr_at_fpr
from privbench.metrics.one_run import epsilon_lower_bound
from privbench.metrics.reconstruction import Recovered, score
from privbench.pixels import denormalise
from privbench.progress import phase

F = TypeVar("F", bound=Finding)


@dataclass(frozen=True)
class Truth:
    """What only the evaluator holds about one attacked message.

    Attributes:
        images: the private images it was computed from, ``[N, C, H, W]`` in [0, 1] on the CPU.
        labels: their labels.
        non_members: images no client holds (the test split), for chance baselines.
        non_member_labels: their labels (for the class-informed baselines; None: those are not scored).
        class_frequencies: each class's share of the training split (what a prior knows).
        mean: per-channel input mean (to bring reconstructions to [0, 1]).
        std: per-channel input std.
        membership: for a membership game, which candidates of the view are members (None otherwise).
        owners: for source inference, each candidate's client (its index in the view's clients).
        holders: for source inference, how many of the view's clients hold each candidate's class.
        informed_scores: for a membership game whose candidates differ in class, the same test's scores from
            records that carry only the class (its AUC is the informed chance; None: the game is class-matched).
    """

    images: torch.Tensor
    labels: torch.Tensor
    non_members: torch.Tensor
    class_frequencies: torch.Tensor
    mean: tuple[float, ...]
    std: tuple[float, ...]
    membership: torch.Tensor | None = None
    non_member_labels: torch.Tensor | None = None
    owners: torch.Tensor | None = None
    holders: torch.Tensor | None = None
    informed_scores: torch.Tensor | None = None


@dataclass(frozen=True)
class Scoring:
    """How to score: the run's seed, the matching cost, LPIPS on or off, where a scorer writes its files, and when
    a true image counts as recovered."""

    seed: int
    match_on: str
    use_lpips: bool
    out: Path
    recovered: Recovered = Recovered()


Scorer = Callable[[Any, Any, Attack, Truth, Scoring], dict[str, Any]]
SCORERS: dict[type[Finding], Scorer] = {}


def register_scorer(kind: type[F]) -> Callable[[Callable[[F, Any, Attack, Truth, Scoring], dict[str, Any]]],
                                                 Callable[[F, Any, Attack, Truth, Scoring], dict[str, Any]]]:
    """Register the scorer of findings of type ``kind`` (and its subclasses, unless they have their own)."""
    def add(fn: Callable[[F, Any, Attack, Truth, Scoring], dict[str, Any]]) -> Callable[[F, Any, Attack, Truth, Scoring], dict[str, Any]]:
        SCORERS[kind] = fn
        return fn
    return add


def score_finding(finding: Finding, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """The privacy figures of ``finding`` (by the scorer of its type), plus the attack's evaluator-side figures."""
    scorer = next((SCORERS[t] for t in type(finding).__mro__ if t in SCORERS), None)
    if scorer is None:
        raise TypeError(f"no scorer is registered for {type(finding).__name__} (privbench.audit.score.register_scorer)")
    return {**scorer(finding, view, attack, truth, how), **attack.evaluate(view, truth.images)}


def score_reconstruction(recon: torch.Tensor, labels: torch.Tensor, truth: torch.Tensor, truth_labels: torch.Tensor,
                         *, non_members: torch.Tensor, seed: int, match_on: str, use_lpips: bool,
                         out: Path, non_member_labels: torch.Tensor | None = None,
                         recovered: Recovered = Recovered()) -> dict[str, Any]:
    """Match ``recon`` one-to-one against ``truth`` (``[N, C, H, W]`` in [0, 1]); score it and the chance
    baselines drawn from ``non_members`` (class-informed ones too, given ``non_member_labels``; the attack's
    ``labels`` name the inferred classes) with the same matching; write ``grid.png`` and ``gallery.npz``.

    Returns the privacy figures: PSNR/SSIM/LPIPS, the fraction recovered, their chance levels and gains, the
    matching.
    """
    with phase("scoring", total=2, unit="set") as bar:
        scores = score(recon, truth, recon_labels=labels, truth_labels=truth_labels, match_on=match_on,
                       use_lpips=use_lpips, recovered=recovered)
        bar.update(1, psnr=scores.get(PSNR_MEAN.key))
        chance = chance_baseline(truth, truth_labels, count=len(recon), test_images=non_members, seed=seed,
                                 match_on=match_on, use_lpips=use_lpips, test_labels=non_member_labels,
                                 inferred_labels=labels, recovered=recovered)
        bar.update(1, chance=chance.get(PSNR_CHANCE.key))
    pairs = scores["matched"]
    write_grid(out / "grid.png", truth[[m["truth"] for m in pairs]], recon[[m["recon"] for m in pairs]])
    chance_images, chance_pairs = chance.pop("chance_images")
    write_gallery(out / "gallery.npz", truth=truth, recon=recon, truth_labels=truth_labels, recon_labels=labels,
                  pairs=pairs, chance=chance_images, chance_pairs=chance_pairs, recovered=recovered)
    scores.update(chance)
    return {NUM_RECONSTRUCTED.key: len(recon), NUM_TRUE.key: len(truth), **scores, **gains(scores),
            "recovered_bar": recovered.bar()}


@register_scorer(Reconstruction)
def _reconstruction(finding: Reconstruction, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """Images: matched against the truth, with the chance baselines (``score_reconstruction``)."""
    privacy: dict[str, Any] = {"failed": finding.failed}
    if finding.attempts:
        privacy.update({"objective": finding.objective})
    privacy["label_source"] = finding.label_source
    if finding.attempts:
        privacy["attempts"] = finding.attempts
    if finding.images is not None and finding.labels is not None:
        how.out.mkdir(parents=True, exist_ok=True)
        recon = finding.images.cpu()
        if not finding.pixels:
            recon = denormalise(recon, truth.mean, truth.std)
        privacy.update(score_reconstruction(recon, finding.labels.cpu(), truth.images, truth.labels,
                                            non_members=truth.non_members, seed=how.seed, match_on=how.match_on,
                                            use_lpips=how.use_lpips, out=how.out,
                                            non_member_labels=truth.non_member_labels, recovered=how.recovered))
        if finding.label_source == "none":
            privacy[LABEL_ACCURACY.key] = float("nan")  # no labels were inferred
    return privacy


@register_scorer(InferredLabels)
def _labels(finding: InferredLabels, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """Labels: the class set and per-class counts against the truth, and against a class-frequency prior."""
    return {**label_scores(finding.counts, truth.labels, truth.class_frequencies), **finding.info}


@register_scorer(InferredProperty)
def _property(finding: InferredProperty, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """A property of the client's data: its class set against the truth and a class-frequency prior."""
    if finding.name != "class_set":
        raise TypeError(f"no scorer for the property {finding.name!r}")
    info = dict(finding.info)
    proportions = info.pop("proportions", None)
    out = {**class_set_scores(set(finding.value), truth.labels, truth.class_frequencies), **info}
    if proportions is not None:
        out.update(proportion_scores({int(c): float(v) for c, v in proportions.items()}, truth.labels,
                                     truth.class_frequencies, set(finding.value)))
    return out


@register_scorer(MembershipScores)
def _membership(finding: MembershipScores, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """Membership: ROC (written to ``roc.png`` and ``membership.npz``), AUC, and TPR at FPR 1 % and 0.1 % with their
    Clopper-Pearson intervals, against the chance line (AUC 0.5, TPR = FPR)."""
    if truth.membership is None:
        raise TypeError("membership scores need a membership game (Truth.membership)")
    members = truth.membership.numpy().astype(bool)
    scores = finding.scores.numpy()[np.asarray(finding.candidates, dtype=int)]
    out: dict[str, Any] = {MIA_AUC.key: auc(scores, members), MIA_MEMBERS.key: int(members.sum()),
                           MIA_NON_MEMBERS.key: int((~members).sum()), "mia_test": finding.info.get("test"),
                           "mia_chance_auc": 0.5}
    for figure, fpr in ((MIA_TPR_1, 0.01), (MIA_TPR_01, 0.001)):
        tpr, hits, n = tpr_at_fpr(scores, members, fpr)
        lo, hi = clopper_pearson(hits, n)
        out.update({figure.key: tpr, f"{figure.key}_lo": lo, f"{figure.key}_hi": hi})
    if truth.informed_scores is not None:  # candidates not class-matched: what the class alone gives the test
        informed = truth.informed_scores.numpy()[np.asarray(finding.candidates, dtype=int)]
        out[MIA_AUC_INFORMED.key] = auc(informed, members)
        out[MIA_TPR_1_INFORMED.key] = tpr_at_fpr(informed, members, 0.01)[0]
    if "level" in finding.info:
        out["mia_level"] = finding.info["level"]
    how.out.mkdir(parents=True, exist_ok=True)
    fprs, tprs = roc(scores, members)
    np.savez(how.out / "membership.npz", scores=scores, members=members, fpr=fprs, tpr=tprs)
    write_roc(how.out / "roc.png", fprs, tprs, title=f"{finding.info.get('test')}: AUC {out[MIA_AUC.key]:.3f}, "
                                                     f"{int(members.sum())} members, {int((~members).sum())} non-members")
    return out


@register_scorer(SourceGuesses)
def _source(finding: SourceGuesses, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """Source inference: the share of records attributed to their own client, against 1 / clients and against a
    prior that knows each client's classes (uniform over the clients holding the record's class)."""
    if truth.owners is None or truth.holders is None:
        raise TypeError("source guesses need the records' owners (Truth.owners, Truth.holders)")
    right = finding.guesses.eq(truth.owners).double()
    return {SOURCE_ACCURACY.key: float(right.mean()), SOURCE_CHANCE.key: 1.0 / len(finding.clients),
            SOURCE_CHANCE_INFORMED.key: float((1.0 / truth.holders.double()).mean()),
            "source_records": len(right), "source_clients": len(finding.clients), **finding.info}


@register_scorer(CanaryScores)
def _canaries(finding: CanaryScores, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """A one-run audit: the membership figures of its canary scores, and its guesses (the ``guesses`` highest in,
    the lowest out) turned into a lower bound on epsilon at its confidence, next to the claim it tests."""
    out = _membership(finding, view, attack, truth, how)
    assert truth.membership is not None
    members = truth.membership.numpy().astype(bool)
    order = np.argsort(-finding.scores.numpy(), kind="stable")
    k = finding.guesses
    right = int(members[order[:k]].sum() + (~members[order[len(order) - k:]]).sum())
    knowledge = getattr(view, "knowledge", {})
    confidence = float(finding.info.get("confidence", 0.95))
    bound = epsilon_lower_bound(len(members), 2 * k, right, delta=float(knowledge.get("delta", 0.0)),
                                confidence=confidence)
    bounds = knowledge.get("round_tpr_bounds", {})
    out.update(fdp_bound(knowledge, len(members), 2 * k, right, confidence=confidence))
    out.update({EPSILON_LOWER.key: bound, EPSILON_CLAIMED.key: knowledge.get("claimed_epsilon"),
                CANARY_TPR_BOUND_1.key: bounds.get("0.01"), CANARY_TPR_BOUND_01.key: bounds.get("0.001"),
                "canary_guesses": 2 * k, "canary_guesses_right": right, "canaries": len(members),
                "epsilon_lower_bound_confidence": confidence})
    return out
