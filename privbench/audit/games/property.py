"""The property game's scorer: a property of a client's data (its class set and proportions) against the truth
and a class-frequency prior. Its messages are staged by the one-message game (a ``basis`` view)."""
from __future__ import annotations

from typing import Any

from privbench.attacks.base import Attack
from privbench.attacks.property.findings import InferredProperty
from privbench.audit.score import Scoring, Truth, register_scorer
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
