"""The evaluator's side of the membership ladder (``attacks.membership.ladder``): each rung scored on the membership
game's candidates as the single tests are, the headline rung as the run's membership figures, and the ladder
printed beneath them."""
from __future__ import annotations

from typing import Any

import numpy as np

from privbench.attacks.base import Attack
from privbench.attacks.membership.findings import LadderScores
from privbench.audit.games import register_summary
from privbench.audit.games.membership import score_membership
from privbench.audit.score import Scoring, Truth, register_scorer
from privbench.figures import MIA_MEMBERS, MIA_NON_MEMBERS
from privbench.metrics.membership import auc, clopper_pearson, tpr_at_fpr

#: The false-positive rates each rung's TPR is read at.
FPRS = ((0.01, "tpr_1"), (0.001, "tpr_01"))


def rung_figures(scores: np.ndarray, members: np.ndarray) -> dict[str, Any]:
    """AUC, and the TPR at FPR 1 % and 0.1 % with their Clopper-Pearson 95 % intervals, of one rung's scores."""
    out: dict[str, Any] = {"auc": auc(scores, members)}
    for fpr, key in FPRS:
        tpr, hits, n = tpr_at_fpr(scores, members, fpr)
        lo, hi = clopper_pearson(hits, n)
        out.update({key: tpr, f"{key}_lo": lo, f"{key}_hi": hi})
    return out


@register_scorer(LadderScores)
def score_ladder(finding: LadderScores, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """The headline rung as ``score_membership`` scores a single test, and ``mia_ladder``: every rung's figures (or
    why it did not run), in the order the attack ran them."""
    out = score_membership(finding, view, attack, truth, how)
    assert truth.membership is not None  # score_membership refuses a game without it
    members = truth.membership.numpy().astype(bool)
    at = np.asarray(finding.candidates, dtype=int)
    ladder: list[dict[str, Any]] = []
    for name, scores in finding.rungs.items():
        ladder.append({"rung": name, **rung_figures(scores.numpy()[at], members)})
    ladder += [{"rung": name, "skipped": why} for name, why in finding.skipped.items()]
    out["mia_ladder"] = ladder
    return out


@register_summary(21)
def ladder_lines(privacy: dict[str, Any], threat: dict[str, Any]) -> list[tuple[str, str]]:
    """The membership ladder, a rung a line."""
    ladder = privacy.get("mia_ladder")
    if not isinstance(ladder, list):
        return []
    lines: list[tuple[str, str]] = [("ladder", "rung: AUC, TPR [95 % Clopper-Pearson] at FPR 1 % and at 0.1 % "
                                               f"({privacy.get(MIA_MEMBERS.key)} members, "
                                               f"{privacy.get(MIA_NON_MEMBERS.key)} non-members; chance 0.5, "
                                               "TPR = FPR)")]
    for rung in ladder:
        if "skipped" in rung:
            lines.append(("", f"{rung['rung']}: not run ({rung['skipped']})"))
            continue
        lines.append(("", f"{rung['rung']}: {rung['auc']:.3f}, {rung['tpr_1']:.3f} [{rung['tpr_1_lo']:.3f}, "
                          f"{rung['tpr_1_hi']:.3f}], {rung['tpr_01']:.3f} [{rung['tpr_01_lo']:.3f}, "
                          f"{rung['tpr_01_hi']:.3f}]"))
    return lines
