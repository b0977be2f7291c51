"""A client's class set from the sign of its head bias's change: the classes whose bias did not fall are present.

Under softmax cross-entropy the head bias's gradient on a batch is ``pbar_c - n_c / B``. For a class the client
holds no record of, ``n_c = 0`` at every step, so the gradient is positive at every step, and plain SGD (with any
non-negative momentum, and clipped per-sample gradients as DP-SGD clips them) only ever lowers that bias: over the
whole update it falls. A bias that did not fall therefore proves its class present, from the upload and the
received model alone, with no public data (the one-step form of this is iDLG's sign rule). A present class whose
share is below the model's mean prediction for it falls too, so the set found is a subset of the true one; it is
exact when every present class outweighs its prediction, as a client of few classes does. Weight decay on the
bias, label smoothing, or noise added to the update (local DP) break the proof; the attack then reads what the
signs say.
"""
from __future__ import annotations

from typing import Any, ClassVar

from privbench.attacks.base import Attack
from privbench.attacks.labels.views import LabelView
from privbench.attacks.property.findings import InferredProperty
from privbench.attacks.views import ViewKind
from privbench.errors import AttackNotApplicableError
from privbench.payloads.kinds import Carries


class BiasSignClassSet(Attack[LabelView, InferredProperty]):
    """Infer a client's class set as the classes whose head bias did not fall over its update (or, in one step's
    gradient, whose bias gradient is not positive)."""

    name = "bias_sign"
    reads: ClassVar[frozenset[Carries]] = frozenset({"gradient", "model"})
    view: ClassVar[ViewKind] = "labels"

    def budget(self) -> dict[str, Any]:
        return {"reads": "the sign of the head bias's change over the update (no public data)"}

    def attack(self, view: LabelView, *, seed: int) -> InferredProperty:
        """The classes whose (pseudo-)gradient on the head bias is at most 0; the largest fall's class alone when
        every bias fell (a client holds some class)."""
        target = view.target
        bias = target.gradient.get(f"{target.head}.bias")
        if bias is None:
            raise AttackNotApplicableError(f"{target.knowledge.get('payload')}: the message does not carry the "
                                           f"classifier head's bias ({target.head}.bias), which the signs are read from")
        signs = bias.detach().double().cpu()  # the pseudo-gradient: -(change) / (lr * steps)
        present = sorted(int(c) for c in (signs <= 0).nonzero().flatten())
        proven = bool(present)
        if not present:
            present = [int(signs.argmin())]
        return InferredProperty(name="class_set", value=present,
                                info={"inferred_classes": present, "bias_rose": proven,
                                      "bias_change_sign": [int(v) for v in (-signs).sign().tolist()]})
