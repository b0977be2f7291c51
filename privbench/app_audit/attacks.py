"""privbench's attacks on the app's uploads: for each client's train reply, record-level membership (the loss-change
test) and its per-class label counts, scored against what the client's data loaders yielded (the evaluator's truth).

Members are the records the client trained on that round; non-members the records it evaluated on (its own held-out
split, which it never trained on), as many as there are members, drawn by the seed. Public labelled data for the
label attack: the other clients' evaluation records (none of them the victim's).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.app_audit.client_side import MAX_RECORDS
from privbench.app_audit.recording import Sent
from privbench.app_audit.simulation import AppRun
from privbench.app_audit.training import Declared, as_model, local_training
from privbench.errors import AttackNotApplicableError
from privbench.payloads import Payload


@dataclass
class ClientRound:
    """One client's train exchange in one round, with what its loaders yielded then (the evaluator's)."""

    client: str
    round: int
    received: Sent
    upload: Sent
    members: tuple[torch.Tensor, torch.Tensor]
    capped: bool = False
    weights: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)  # the model the upload stands for
    not_a_model: str | None = None  # why the reply was not read as a model (then no attack runs on it)

    def payloads(self, training: Any) -> tuple[Payload, Payload]:
        """The exchange as privbench payloads: the model received (``global_model``) and the upload (``update``:
        the model the reply stands for)."""
        base = Payload.from_tensors(kind="global_model", round=self.round, sender="server", receiver=self.client,
                                    tensors=self.received.arrays)
        upload = Payload.from_tensors(kind="update", round=self.round, sender=self.client, receiver="server",
                                      tensors=self.weights or self.upload.arrays, base=base.id, training=training)
        return upload, base


def each_once(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each record once, in first-seen order (a loader yields a record once per epoch)."""
    seen: dict[bytes, int] = {}
    for i, row in enumerate(x.reshape(len(x), -1).numpy()):
        seen.setdefault(row.tobytes(), i)
    keep = torch.tensor(sorted(seen.values()), dtype=torch.long)
    return x[keep], y[keep]


def num_examples(metrics: dict[str, Any]) -> int | None:
    """A reply's own ``num-examples`` (or ``num_examples``) where it is a plausible count (1 to 100,000), else None.

    Example:
        >>> num_examples({"num-examples": 32}), num_examples({"num_examples": 0.5}), num_examples({"loss": 1.0})
        (32, None, None)
    """
    stated = metrics.get("num-examples", metrics.get("num_examples"))
    if isinstance(stated, (int, float)) and not isinstance(stated, bool) and 1 <= stated <= 100_000:
        return int(stated)
    return None


def stated_count(cr: ClientRound) -> tuple[int, str]:
    """The records the client says the upload was trained on (its ``num-examples``, read only for its own upload),
    else the count the evaluator noted, and which it was."""
    stated = num_examples(cr.upload.metrics)
    if stated is not None:
        return stated, "the client's num-examples"
    return len(cr.members[1]), "not stated: the records its loaders yielded"


def client_rounds(run: AppRun, reply_kind: str = "auto") -> list[ClientRound]:
    """Every train exchange whose reply carries arrays and whose client's loaders yielded records, in round and
    client order, each reply read as the model it stands for (``training.as_model``)."""
    notes = {n["message_id"]: n for n in run.notes if n["type"] == "train" and len(n["labels"])}
    sent = {(m.message_id): m for m in run.messages if m.direction == "down" and m.kind == "train"}
    out = []
    for reply in run.messages:
        if reply.direction != "up" or reply.kind != "train" or not reply.arrays:
            continue
        note, received = notes.get(reply.message_id), sent.get(reply.message_id)
        if note is None or received is None:
            continue
        weights, why = as_model(received.arrays, reply.arrays, reply_kind)
        out.append(ClientRound(f"client{run.partitions.get(reply.node, reply.node)}", reply.round, received, reply,
                               each_once(note["inputs"], note["labels"]), bool(note.get("capped", False)), weights,
                               why))
    return sorted(out, key=lambda c: (c.round, int(c.client.removeprefix("client"))))


def _rows(x: torch.Tensor) -> list[bytes]:
    return [row.tobytes() for row in x.reshape(len(x), -1).numpy()]


def held_out(run: AppRun, client: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The records ``client`` evaluated on (its evaluate calls, and passes under ``torch.no_grad`` in its train
    calls), each once, less any record it trained on in any round; None when none is left."""
    node = next((n for n, p in run.partitions.items() if f"client{p}" == client), None)
    mine = [n for n in run.notes if n["node"] == node]
    if any(n.get("capped") for n in mine if n["type"] == "train"):
        return None  # records trained on beyond the cap are not known: none can be called a non-member
    rows = [(n["held_inputs"], n["held_labels"]) for n in mine if len(n.get("held_labels", ()))]
    rows += [(n["inputs"], n["labels"]) for n in mine if n["type"] == "evaluate" and len(n["labels"])]
    if not rows:
        return None
    x, y = each_once(torch.cat([x for x, _ in rows]), torch.cat([y for _, y in rows]))
    trained = {r for n in mine if n["type"] == "train" and len(n["labels"]) for r in _rows(n["inputs"])}
    keep = torch.tensor([r not in trained for r in _rows(x)], dtype=torch.bool)
    return (x[keep], y[keep]) if bool(keep.any()) else None


def membership(model: Callable[[], nn.Module], cr: ClientRound, outside: tuple[torch.Tensor, torch.Tensor],
               *, seed: int) -> dict[str, Any]:
    """Loss-change membership on the upload: AUC and TPR at 1 % FPR over members and as many non-members."""
    from privbench.attacks.membership.record import MembershipInference
    from privbench.attacks.membership.views import MembershipView
    from privbench.metrics.membership import auc, clopper_pearson, tpr_at_fpr

    members_x, members_y = cr.members
    n = min(len(members_y), len(outside[1]))
    if n < 10:
        raise AttackNotApplicableError(f"{cr.client} round {cr.round}: {n} members or non-members, fewer than 10")
    gen = torch.Generator().manual_seed(seed)
    pick_in, pick_out = torch.randperm(len(members_y), generator=gen)[:n], torch.randperm(len(outside[1]), generator=gen)[:n]
    candidates = torch.cat([members_x[pick_in], outside[0][pick_out]])
    labels = torch.cat([members_y[pick_in], outside[1][pick_out]])
    upload, base = cr.payloads(None)
    view = MembershipView.from_payload(upload, base=base, model=model(), candidates=candidates, labels=labels,
                                       pool="the client's own evaluation records")
    scores = MembershipInference(test="loss_change", max_candidates=2 * n).attack(view, seed=seed).scores.numpy()
    truth = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    tpr, hits, positives = tpr_at_fpr(scores, truth, 0.01)
    low, high = clopper_pearson(hits, positives)
    return {"membership_auc": auc(scores, truth), "membership_auc_chance": 0.5, "membership_tpr_at_1pct_fpr": tpr,
            "membership_tpr_at_1pct_fpr_interval": [low, high], "membership_tpr_at_1pct_fpr_chance": 0.01,
            "members": n, "non_members": n}


def label_counts(model: Callable[[], nn.Module], cr: ClientRound, public: tuple[torch.Tensor, torch.Tensor],
                 flags: Declared, run_config: dict[str, Any], *, seed: int) -> dict[str, Any]:
    """The per-class counts of the upload's records from the head's bias along the update, scored exactly."""
    from privbench.attacks.labels.counts import LabelCounts
    from privbench.attacks.labels.views import LabelView
    from privbench.attacks.target import AttackTarget
    from privbench.metrics.labels import label_scores

    num, counted = stated_count(cr)
    if cr.capped:
        raise AttackNotApplicableError(f"the client's loaders yielded more records than the audit notes per message "
                                       f"({MAX_RECORDS}): its label truth would be a part")
    if public[0].ndim != 4:
        raise AttackNotApplicableError(f"its inputs are {list(public[0].shape[1:])}, not images [C, H, W]")
    training, sources = local_training(flags, cr.received.config, run_config, num)
    if training is None:
        from privbench.app_audit.training import ask
        raise AttackNotApplicableError(ask(sources))
    upload, base = cr.payloads(training)
    net = model()
    c, h, w = (int(v) for v in public[0].shape[1:])
    with torch.no_grad():
        classes = int(net.eval()(public[0][:2]).shape[-1])
    net.train()  # the client's training is replayed as it ran
    target = AttackTarget.from_payload(upload, base=base, model=net, num_images=num, image_shape=(c, h, w),
                                       num_classes=classes)
    finding = LabelCounts(public=len(public[1])).attack(LabelView(target, public[0], public[1]), seed=seed)
    frequencies = torch.bincount(public[1], minlength=classes).double() / len(public[1])
    scores = label_scores(finding.counts, cr.members[1], frequencies)
    return {**scores, "training": {"lr": training.lr, "steps": training.steps, "batch_size": training.batch_size,
                                   "epochs": training.epochs, "num_samples": num},
            "training_from": {**sources, "num_samples": counted}}
