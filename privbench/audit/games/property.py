"""The property game's scorer: a property of a client's data (its class set and proportions) against the truth
and a class-frequency prior. Its messages are staged by the one-message game (a ``basis`` view)."""
from __future__ import annotations

from typing import Any

from privbench.attacks.base import Attack
from privbench.attacks.property.findings import InferredProperty
from privbench.audit.games import register_summary
from privbench.audit.score import Scoring, Truth, register_scorer
from privbench.figures import (
    CLASS_PROPORTION_ERROR,
    CLASS_PROPORTION_ERROR_CHANCE,
    CLASS_PROPORTION_ERROR_SET,
    LABEL_SET_EXACT,
    LABEL_SET_EXACT_CHANCE,
    LABEL_SET_JACCARD,
    LABEL_SET_JACCARD_CHANCE,
)
from privbench.metrics.labels import class_set_scores, proportion_scores


@register_scorer(InferredProperty)
def score_property(finding: InferredProperty, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
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


@register_summary(40)
def class_set_lines(privacy: dict[str, Any], threat: dict[str, Any]) -> list[tuple[str, str]]:
    """Class sets and proportions (from a subspace)."""
    lines: list[tuple[str, str]] = []
    class_set = (f"class set exact {LABEL_SET_EXACT.shown(privacy)} (prior "
                 f"{LABEL_SET_EXACT_CHANCE.shown(privacy)})")
    if LABEL_SET_JACCARD.key in privacy:
        lines.append(("classes", f"inferred {privacy.get('inferred_classes')}: {class_set}, overlap "
                                 f"{LABEL_SET_JACCARD.shown(privacy)} (prior "
                                 f"{LABEL_SET_JACCARD_CHANCE.shown(privacy)})"))
        if CLASS_PROPORTION_ERROR.key in privacy:
            lines.append(("", f"proportions {privacy.get('inferred_proportions')}: off by "
                              f"{CLASS_PROPORTION_ERROR.shown(privacy)} in total variation (prior "
                              f"{CLASS_PROPORTION_ERROR_CHANCE.shown(privacy)}, uniform over "
                              f"the set {CLASS_PROPORTION_ERROR_SET.shown(privacy)})"))
    return lines
