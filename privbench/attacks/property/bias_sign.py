"""A client's class set from the sign of its head bias's change: the classes whose bias rose are present.

Under softmax cross-entropy the head bias's gradient on a batch is ``pbar_c - n_c / B``. For a class the client
holds no record of, ``n_c = 0`` at every step, so the gradient is positive at every step, and plain SGD (with any
non-negative momentum, and clipped per-sample gradients as DP-SGD clips them) only ever lowers that bias: over the
whole update it falls. A bias that rose therefore proves its class present, from the upload and the received model
alone, with no public data (the one-step form of this is iDLG's sign rule). A present class whose
share is below the model's mean prediction for it falls too, so the set found is a subset of the true one; it is
exact when every present class outweighs its prediction, as a client of few classes does. Weight decay on the
bias, label smoothing, DP-SGD's per-step noise, noise added to the upload (local DP), or a penalty taken by
gradient steps (GENE-FL's with momentum or a large ``lr c``) break the proof; the attack then reads what the signs
say, and ``bias_sign_proof`` says which of these the message's declared training shows. Read from an aggregate, the
set found lies within the union of its clients' classes.
"""
from __future__ import annotations

from typing import Any, ClassVar

from privbench.attacks.base import Attack
from privbench.attacks.labels.views import LabelView
from privbench.attacks.property.findings import InferredProperty
from privbench.attacks.views import ViewKind
from privbench.errors import AttackNotApplicableError
from privbench.payloads.kinds import Carries

#: The declared training settings under which the proof holds (anything else recorded is a penalty term)
PLAIN = frozenset({"lr", "steps", "batch_size", "num_samples", "epochs", "momentum"})


def proof(knowledge: dict[str, Any]) -> str:
    """Whether the message's declared training keeps an absent class's bias falling: ``holds``, or why not."""
    if knowledge.get("payload_kind") in ("cluster_model", "global_model", "aggregate"):
        return "an aggregate: the set found is within the union of its clients' classes"
    training = knowledge.get("training") or {}
    if training.get("clip"):
        return "DP-SGD: its per-step noise can raise an absent class's bias"
    penalty = sorted(k for k, v in training.items() if k not in PLAIN and k != "clip" and v)
    if penalty:
        return f"a penalty ({', '.join(penalty)}) can raise an absent class's bias"
    return "holds (noise added to the upload after training, as local DP-FedAvg adds, would break it unseen)"


class BiasSignClassSet(Attack[LabelView, InferredProperty]):
    """Infer a client's class set as the classes whose head bias rose over its update (or, in one step's gradient,
    whose bias gradient is negative)."""

    name = "bias_sign"
    reads: ClassVar[frozenset[Carries]] = frozenset({"gradient", "model"})
    view: ClassVar[ViewKind] = "labels"
    counts_upload: ClassVar[bool] = True
    public = 0  # the label game's public images: none are read

    def budget(self) -> dict[str, Any]:
        return {"reads": "the sign of the head bias's change over the update (no public data)"}

    def attack(self, view: LabelView, *, seed: int) -> InferredProperty:
        """The classes whose (pseudo-)gradient on the head bias is below 0 (an unchanged bias, as a sparsified or
        pruned upload leaves most, proves nothing); the class whose bias fell least when none rose (a client holds
        some class)."""
        target = view.target
        bias = target.gradient.get(f"{target.head}.bias")
        if bias is None:
            raise AttackNotApplicableError(f"{target.knowledge.get('payload')}: the message does not carry the "
                                           f"classifier head's bias ({target.head}.bias), which the signs are read "
                                           "from")
        signs = bias.detach().double().cpu()  # the pseudo-gradient: -(change) / (lr * steps)
        present = sorted(int(c) for c in (signs < 0).nonzero().flatten())
        rose = bool(present)
        if not present:
            present = [int(signs.argmin())]
        return InferredProperty(name="class_set", value=present,
                                info={"inferred_classes": present, "bias_rose": rose,
                                      "bias_sign_proof": proof(target.knowledge),
                                      "bias_change_sign": [int(v) for v in (-signs).sign().tolist()]})
