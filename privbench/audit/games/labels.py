"""The label game: the gradient view of each audited client's message and labelled public data (and, for an
``attack.labels=oracle`` control row only, the batch's true counts); the evaluator scores the inferred classes and
counts against the truth and a class-frequency prior."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from privbench.attacks.base import Attack
from privbench.attacks.labels.findings import InferredLabels
from privbench.attacks.labels.views import LabelView
from privbench.audit.games import MessageGame, Play, register_game, register_summary
from privbench.audit.games.message import gradient_view
from privbench.audit.plan import Plan
from privbench.audit.score import Scoring, Truth, register_scorer
from privbench.data import FederatedData
from privbench.figures import (
    LABEL_COUNT_ERROR,
    LABEL_COUNT_ERROR_CHANCE,
    LABEL_COUNTS_EXACT,
    LABEL_SET_EXACT,
    LABEL_SET_EXACT_CHANCE,
    LABEL_SET_JACCARD,
)
from privbench.metrics.labels import label_scores
from privbench.payloads import Payload
from privbench.victim import Victim


@register_game("labels")
class Labels(MessageGame):
    """The gradient view of each audited client's message with ``attack.public`` test-split images (no client holds
    them) and their labels. For a label attack (``counts_upload``) a model upload's counts are of every image its
    record says it was trained on (its ``num_samples``, which travels in clear), a gradient's of its batch; for a
    reconstruction, of the images it rebuilds."""

    photographs = True

    def play(self, p: Plan, victim: Victim, payload: Payload, base: Payload | None, records: list[int],
             model: nn.Module, data: FederatedData) -> Play:
        whole = payload.spec.carries == "model" and getattr(p.attack, "counts_upload", False)
        count = p.choice.images(payload, victim, unroll=p.attack.unroll or whole)
        target = gradient_view(p, victim, payload, base, model, data, count=count)
        view = LabelView.from_test_split(target, data.test.images, data.test.labels,
                                         count=int(getattr(p.attack, "public", 2000)), seed=p.seed,
                                         mean=data.train.mean, std=data.train.std)
        if getattr(p.attack, "labels", None) == "oracle" and records:  # a control row: the evaluator's truth
            true = data.train.labels.cpu()[torch.tensor(records, dtype=torch.long)]
            view.oracle_counts = torch.bincount(true.long(), minlength=data.train.num_classes)
        return Play(payload, view, records)


@register_scorer(InferredLabels)
def score_labels(finding: InferredLabels, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """Labels: the class set and per-class counts against the truth, and against a class-frequency prior."""
    return {**label_scores(finding.counts, truth.labels, truth.class_frequencies), **finding.info}


@register_summary(45)
def label_count_lines(privacy: dict[str, Any], threat: dict[str, Any]) -> list[tuple[str, str]]:
    """A batch's class set and label counts."""
    lines: list[tuple[str, str]] = []
    class_set = (f"class set exact {LABEL_SET_EXACT.shown(privacy)} (prior "
                 f"{LABEL_SET_EXACT_CHANCE.shown(privacy)})")
    if LABEL_SET_EXACT.key in privacy and LABEL_SET_JACCARD.key not in privacy:
        lines.append(("labels", f"{class_set}, counts exact "
                                f"{LABEL_COUNTS_EXACT.shown(privacy)}, count error per class "
                                f"{LABEL_COUNT_ERROR.shown(privacy)} (prior "
                                f"{LABEL_COUNT_ERROR_CHANCE.shown(privacy)})"))
    return lines
