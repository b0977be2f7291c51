"""The label game: the gradient view of each audited client's message and labelled public data; the evaluator
scores the inferred classes and counts against the truth and a class-frequency prior."""
from __future__ import annotations

from typing import Any

from torch import nn

from privbench.attacks.base import Attack
from privbench.attacks.labels.findings import InferredLabels
from privbench.attacks.labels.views import LabelView
from privbench.audit.games import MessageGame, Play, register_game
from privbench.audit.games.message import gradient_view
from privbench.audit.plan import Plan
from privbench.audit.score import Scoring, Truth, register_scorer
from privbench.data import FederatedData
from privbench.metrics.labels import label_scores
from privbench.payloads import Payload
from privbench.victim import Victim


@register_game("labels")
class Labels(MessageGame):
    """The gradient view of each audited client's message with ``attack.public`` test-split images (no client holds
    them) and their labels."""

    def play(self, p: Plan, victim: Victim, payload: Payload, base: Payload | None, records: list[int],
             model: nn.Module, data: FederatedData) -> Play:
        target = gradient_view(p, victim, payload, base, model, data)
        view = LabelView.from_test_split(target, data.test.images, data.test.labels,
                                         count=int(getattr(p.attack, "public", 2000)), seed=p.seed,
                                         mean=data.train.mean, std=data.train.std)
        return Play(payload, view, records)


@register_scorer(InferredLabels)
def score_labels(finding: InferredLabels, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """Labels: the class set and per-class counts against the truth, and against a class-frequency prior."""
    return {**label_scores(finding.counts, truth.labels, truth.class_frequencies), **finding.info}
