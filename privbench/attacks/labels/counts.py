"""The label-count attack (``attack=labels``) and the batch labels gradient inversions take from it: counts from
the head's bias gradient (``bias.py``, any message) or its weight and bias by shadow batches (``head.py``, one
step's gradient)."""
from __future__ import annotations

from typing import Annotated, Any, ClassVar

import numpy as np
import torch

from privbench.attacks.base import Attack
from privbench.attacks.labels.bias import estimate_counts
from privbench.attacks.labels.bounds import checked_head_counts, counts_from_bounds, head_bounds
from privbench.attacks.labels.findings import InferredLabels
from privbench.attacks.labels.head import counts_from_head
from privbench.attacks.labels.views import LabelView
from privbench.attacks.target import AttackTarget
from privbench.attacks.views import ViewKind
from privbench.errors import AttackNotApplicableError
from privbench.payloads import kind as payload_kind
from privbench.payloads.kinds import Carries
from privbench.schema import Iterations, Number, PublicImages, Shadows

#: How counts are read: the head's bias (any message), its weight and bias by shadow batches (one step's
#: gradient), the bounds one step's gradient proves alone (``bounds.py``), or ``auto`` (for a gradient the shadow
#: batches' counts where the bounds admit them, else the bounds'; bias for a model payload).
ESTIMATORS = ("auto", "bias", "head", "bounds")
#: What ``knowledge["labels"]`` says of each one-step source.
HOW = {"head": "per-class counts recovered from the head's weight and bias gradients (shadow batches of public "
               "images), within the bounds the gradient proves",
       "bounds": "per-class counts from the bounds the head's gradient proves (the shadow batches' counts broke "
                 "them: public data unlike the client's)",
       "unchecked": "per-class counts recovered from the head's weight and bias gradients (shadow batches of public "
                    "images), unchecked (clipped per sample, or not one clean step of the declared batch)"}


#: Where a gradient inversion's batch labels come from: ``auto`` (recovered counts for a batch of more than one
#: image when the view brings public data and the message carries the head's weight and bias; the head gradient's
#: sign rule otherwise), ``counts`` (always the recovered counts), ``sign`` (iDLG's rule, repeated for a batch) or
#: ``oracle`` (the batch's true per-class counts, handed over by the evaluator: a control row, not a threat).
LABEL_RULES = ("auto", "counts", "sign", "oracle")
#: What ``knowledge["labels"]`` and ``knowledge["oracle"]`` say of labels the evaluator handed over.
ORACLE = ("ORACLE: the batch's true per-class counts, handed to the attack by the evaluator (a control that "
          "separates the label source from the rest of the attack, not an attack a server can mount)")


def check_label_rule(labels: str, public: int) -> None:
    """Refuse an unknown ``attack.labels`` rule or no public images (an inversion's constructor, before compute)."""
    if labels not in LABEL_RULES or public < 1:
        raise ValueError(f"attack.labels must be one of {', '.join(LABEL_RULES)} and attack.public >= 1")


def with_counted_labels(view: AttackTarget | LabelView, rule: str, *, seed: int, points: int = 1) -> AttackTarget:
    """The view's gradient target with its candidates' labels taken from the recovered per-class counts where ``rule``
    asks for them (``LABEL_RULES``): ``head`` counts (shadow batches) from one step's gradient, ``bias`` counts along
    the update from a model payload; the target's ``knowledge`` says which. A plain target (no public data), the
    ``sign`` rule and, under ``auto``, an aggregate replayed member by member (the counts do not say which member
    holds which class) leave it as it is; ``counts`` without public data is refused."""
    if rule not in LABEL_RULES:
        raise ValueError(f"attack.labels={rule!r} is not one of {', '.join(LABEL_RULES)}")
    if not isinstance(view, LabelView):
        if rule == "oracle" and not view.knowledge.get("oracle"):
            return with_true_counts(view, None)
        if rule == "counts" and view.labels is None:
            raise AttackNotApplicableError("attack.labels=counts needs labelled public data, which this view lacks")
        return view
    target = view.target
    if rule == "oracle":
        return with_true_counts(target, view.oracle_counts)
    head = target.head
    carried = f"{head}.weight" in target.gradient and f"{head}.bias" in target.gradient
    members = len(target.unroll.parts) if target.unroll is not None else 1  # an aggregate replayed member by member
    if rule == "sign" or (rule == "auto" and (target.num_images == 1 or not carried or members > 1)):
        return target
    images, labels = view.public, view.public_labels
    one_step = target.unroll is None and int((target.knowledge.get("training") or {}).get("steps", 1)) <= 1
    if one_step and carried:
        counts, source = checked_head_counts(target, images, labels, seed=seed)
        how = HOW[source]
    else:
        counts = estimate_counts(target, images, labels, points=points)
        how = "per-class counts recovered from the head's bias gradient along the update"
    target.labels = torch.from_numpy(np.repeat(np.arange(len(counts)), counts)).long().to(target.device)
    target.knowledge["labels"] = how
    return target


def with_true_counts(target: AttackTarget, counts: torch.Tensor | None) -> AttackTarget:
    """``target`` with its candidates' labels set from the batch's true per-class ``counts`` (the evaluator's,
    ``LabelView.oracle_counts``), its ``knowledge`` marked ``ORACLE``. Refused when the game handed none over or
    they do not add up to the batch."""
    if counts is None:
        raise AttackNotApplicableError("attack.labels=oracle needs the evaluator's truth, which only privbench's "
                                       "label game hands over (not a message read from a file or an app)")
    counts = counts.long().cpu()
    if bool((counts < 0).any()):
        raise AttackNotApplicableError("attack.labels=oracle: a true count below zero")
    if int(counts.sum()) != target.num_images:
        raise AttackNotApplicableError(f"attack.labels=oracle: the true counts add up to {int(counts.sum())} "
                                       f"images, not the batch's {target.num_images}")
    if target.unroll is not None and len(target.unroll.parts) > 1:
        raise AttackNotApplicableError("attack.labels=oracle hands over one batch's true counts; an aggregate "
                                       "replayed member by member needs each member's")
    target.labels = torch.repeat_interleave(torch.arange(len(counts)), counts).to(target.device)
    target.knowledge["labels"] = target.knowledge["oracle"] = ORACLE
    return target


def counted(target: AttackTarget) -> dict[int, int] | None:
    """The per-class counts a target's labels were set from (``with_counted_labels``), for a finding's info."""
    if target.labels is None:
        return None
    classes, numbers = target.labels.unique(return_counts=True)
    return {int(c): int(n) for c, n in zip(classes, numbers)}


class LabelCounts(Attack[LabelView, InferredLabels]):
    """The classes a message was computed from and how many images of each, from the head's bias gradient.

    Args:
        iterations: fixed-point iterations of the class-conditional estimate of the batch's mean prediction.
        public: most public (test-split) images used for that estimate.
        points: models along a model payload's update at which that estimate is taken and averaged (1: the
            received model only; a gradient always uses the received model).
        estimator: ``auto`` (``head`` for one step's gradient, ``bias`` for a model payload), ``bias`` or ``head``
            (the head's weight and bias gradients by shadow batches; gradient payloads only) or ``bounds`` (the
            bounds one step's gradient proves, no public data). ``auto`` checks ``head``'s counts against the
            bounds and takes the bounds' where they break them.
        shadows: shadow batches of each ``head`` regression.
        refits: regressions refitted around the counts found.
    """

    name = "labels"
    reads: ClassVar[frozenset[Carries]] = frozenset({"gradient", "model"})
    view: ClassVar[ViewKind] = "labels"
    counts_upload: ClassVar[bool] = True

    def __init__(self, *, iterations: Iterations = 10, public: PublicImages = 2000,
                 points: Annotated[int, Number(integer=True, low=1, high=10**4)] = 1, estimator: str = "auto",
                 shadows: Shadows = 4000, refits: Annotated[int, Number(integer=True, low=0, high=100)] = 1) -> None:
        if iterations < 0 or public < 1 or points < 1 or shadows < 10 or refits < 0:
            raise ValueError("attack.iterations must be >= 0, attack.public >= 1, attack.points >= 1, "
                             "attack.shadows >= 10 and attack.refits >= 0")
        if estimator not in ESTIMATORS:
            raise ValueError(f"attack.estimator={estimator!r} is not one of {', '.join(ESTIMATORS)}")
        self.iterations, self.public, self.points = iterations, public, points
        self.estimator, self.shadows, self.refits = estimator, shadows, refits

    def cannot_read(self, kind: str) -> str | None:
        reason = super().cannot_read(kind)
        if reason is None and self.estimator in ("head", "bounds") and payload_kind(kind).carries != "gradient":
            return (f"attack.estimator={self.estimator} reads one step's head gradient; {kind} is a multi-step "
                    "model payload (use attack.estimator=bias or auto)")
        return reason

    def budget(self) -> dict[str, Any]:
        out: dict[str, Any] = {"estimator": self.estimator, "public_images": self.public}
        if self.estimator != "bias":
            out.update({"shadow_batches": self.shadows, "refits": self.refits})
        return out

    def attack(self, view: LabelView, *, seed: int) -> InferredLabels:
        target = view.target
        one_step = int((target.knowledge.get("training") or {}).get("steps", 1)) <= 1
        use = self.estimator if self.estimator != "auto" else ("checked" if one_step else "bias")
        if use == "checked":
            counts, source = checked_head_counts(target, view.public, view.public_labels, shadows=self.shadows,
                                                 refits=self.refits, seed=seed)
            use = "bounds" if source == "bounds" else "head"
        elif use == "head":
            counts = counts_from_head(target, view.public, view.public_labels, shadows=self.shadows,
                                      refits=self.refits, seed=seed)
        elif use == "bounds":
            counts = _bounds_only(target, view.public)
        else:
            counts = estimate_counts(target, view.public, view.public_labels, points=self.points,
                                     iterations=self.iterations)
        return InferredLabels(counts={int(c): int(n) for c, n in enumerate(counts) if n > 0},
                              info={"estimator": use})


def _bounds_only(target: AttackTarget, public: torch.Tensor) -> np.ndarray:
    """``attack.estimator=bounds``: the counts from the bounds the head's gradient proves alone."""
    bounds = head_bounds(target, public)
    if not bounds.feasible:
        raise AttackNotApplicableError(f"the head's bias gradient admits no counts of a batch of "
                                       f"{target.num_images}: not one clean step of that batch")
    return counts_from_bounds(target.gradient[f"{target.head}.bias"], bounds)
