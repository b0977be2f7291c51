"""The record-membership game: each audited client's message and candidate records, half of them in its training
and half test-split records of the same classes; the evaluator scores the attack's ROC against the chance line."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.attacks.base import Attack
from privbench.attacks.membership.findings import MembershipScores
from privbench.attacks.membership.lira import largest_remainder
from privbench.attacks.membership.views import MembershipView
from privbench.audit.games import Game, Play, messages, register_game, register_summary
from privbench.audit.output import write_roc
from privbench.audit.plan import Plan
from privbench.audit.score import Scoring, Truth, register_scorer
from privbench.data import FederatedData
from privbench.errors import AttackNotApplicableError
from privbench.figures import (
    MIA_AUC,
    MIA_AUC_INFORMED,
    MIA_MEMBERS,
    MIA_NON_MEMBERS,
    MIA_TPR_01,
    MIA_TPR_1,
    MIA_TPR_1_INFORMED,
)
from privbench.metrics.membership import auc, clopper_pearson, roc, tpr_at_fpr
from privbench.payloads import Payload, PayloadStore
from privbench.payloads import kind as payload_kind
from privbench.pixels import normalise


def membership_game(p: Plan, members: list[int], payload: Payload, base: Payload | None, model: nn.Module,
                    data: FederatedData, untouched: torch.Tensor | None = None) -> tuple[MembershipView, torch.Tensor]:
    """The membership game of one message: its training records (at most half of ``attack.max_candidates``) and as
    many test-split records of the same classes, shuffled; the view, and which candidates are members (the
    evaluator's). Members whose class has no test record left are not used. The classes' other test records are
    the attacker's population (shadow training). With ``attack.non_members`` above the members' count, the
    non-members beyond the pairs are ``untouched`` train records (no model the message derives from trained on
    them), drawn in the members' class proportions."""
    generator = torch.Generator().manual_seed(p.seed * 7919 + 17)
    train_labels, test_labels = data.train.labels.cpu(), data.test.labels.cpu()
    chosen = torch.tensor(sorted(set(members)), dtype=torch.long)
    chosen = chosen[torch.randperm(len(chosen), generator=generator)]
    budget = int(getattr(p.attack, "max_candidates", 1000)) // 2
    same_class = {int(c): test_labels.eq(c).nonzero().flatten() for c in train_labels[chosen].unique()}
    free = {c: rows[torch.randperm(len(rows), generator=generator)].tolist() for c, rows in same_class.items()}
    kept: list[int] = []
    partners: list[int] = []
    for i in chosen.tolist():
        pool = free[int(train_labels[i])]
        if pool and len(kept) < budget:
            kept.append(i)
            partners.append(pool.pop())
    if not kept:
        raise AttackNotApplicableError(f"{payload.id}: no member record has a test record of its class to pair with")
    wanted = int(getattr(p.attack, "non_members", 0) or 0) - len(partners)
    extra = extra_non_members(train_labels, train_labels[kept], untouched, wanted, generator) if wanted > 0 else []
    if set(extra) & set(members):
        raise AttackNotApplicableError(f"{payload.id}: a record taken as untouched is in the message's training")
    train_rows = torch.tensor(kept + extra, device=data.train.images.device)
    images = torch.cat([data.train.images[train_rows].cpu(),
                        data.test.images[torch.tensor(partners, device=data.test.images.device)].cpu()]).float() / 255.0
    labels = torch.cat([train_labels[kept + extra], test_labels[partners]])
    is_member = torch.cat([torch.ones(len(kept), dtype=torch.bool),
                           torch.zeros(len(extra) + len(partners), dtype=torch.bool)])
    order = torch.randperm(len(labels), generator=generator)
    device = next(model.parameters()).device
    left = sorted(r for rows in free.values() for r in rows)  # the candidates' classes' other test records
    rows = torch.tensor(left, dtype=torch.long)
    population = (normalise(data.test.images[rows.to(data.test.images.device)].cpu().float() / 255.0,
                            data.train.mean, data.train.std).to(device), test_labels[rows].to(device))
    view = MembershipView.from_payload(payload, base=base, model=model,
                                       candidates=normalise(images[order], data.train.mean, data.train.std).to(device),
                                       labels=labels[order].to(device),
                                       pool=f"{len(kept)} training records of the message and {len(partners)} "
                                            "test-split records of the same classes"
                                            + (f" and {len(extra)} train-split records no model it derives from "
                                               "trained on, in the members' class proportions" if extra else "")
                                            + ", shuffled", population=population)
    return view, is_member[order]


def extra_non_members(labels: torch.Tensor, members: torch.Tensor, untouched: torch.Tensor | None, wanted: int,
                      generator: torch.Generator) -> list[int]:
    """``wanted`` rows of ``untouched`` (train-split indices) per class in ``members``' label proportions (largest
    remainder); refused in one line when a class has too few."""
    if untouched is None:
        raise AttackNotApplicableError("attack.non_members above the members' count needs the train records no "
                                       "model trained on, which this game was not given")
    classes, counts = members.unique(return_counts=True)
    out: list[int] = []
    for c, n in zip(classes.tolist(), largest_remainder(counts, wanted).tolist()):
        pool = untouched[labels[untouched].eq(c)]
        if len(pool) < n:
            raise AttackNotApplicableError(
                f"attack.non_members: class {c} needs {n} train records no model trained on and has {len(pool)}; "
                "lower attack.non_members, or let fewer clients take part (data.num_clients, fl.participants)")
        out += pool[torch.randperm(len(pool), generator=generator)[:n]].tolist()
    return out


def untouched_records(store: PayloadStore, data: FederatedData, round_: int) -> torch.Tensor:
    """Train-split indices no client trained on up to ``round_``: neither in any model or gradient message of those
    rounds nor held by a client that sent one (its whole dataset counts), nor held by an agnostic client. A record
    that entered only a client's subspace basis (GENE-FL's clustering) trained no model and stays untouched."""
    touched: set[int] = set()
    for record in store.records():
        spec = payload_kind(str(record.get("kind")))
        if int(record.get("round", 0)) <= round_ and (spec.carries == "secret" or spec.aggregate and
                                                      str(record.get("sender", "")).startswith("cohort")):
            raise AttackNotApplicableError("attack.non_members beyond the class-matched pairs needs to know whose "
                                           "records trained a model, which secure aggregation hides from the store")
        if int(record.get("round", 0)) > round_ or spec.carries not in TRAINED:
            continue
        touched.update(store.truth(record["id"]))
        sender = str(record.get("sender", ""))
        if sender.removeprefix("client").isdigit():
            index = int(sender.removeprefix("client"))
            if index < len(data.clients):
                touched.update(int(i) for i in data.clients[index])
    for held in data.agnostic_clients:
        touched.update(int(i) for i in held)
    free = sorted(set(range(len(data.train.labels))) - touched)
    return torch.tensor(free, dtype=torch.long)


#: What a message carries when a model was trained on its records.
TRAINED = ("model", "gradient")


@register_game("membership")
class Membership(Game):
    """One membership game per audited client's message."""

    def stage(self, p: Plan, store: PayloadStore, model: nn.Module, data: FederatedData, clients: list[int]
              ) -> list[Play]:
        plays = []
        for payload, base, records in messages(p, store, clients):
            free = (untouched_records(store, data, payload.round) if getattr(p.attack, "non_members", 0) else None)
            view, members = membership_game(p, records, payload, base, model, data, free)
            plays.append(Play(payload, view, records, {"membership": members}))
        return plays


@register_scorer(MembershipScores)
def score_membership(finding: MembershipScores, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
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
    out |= {k: v for k, v in finding.info.items() if k.startswith("complet")}  # attack.complete=public's fit
    how.out.mkdir(parents=True, exist_ok=True)
    fprs, tprs = roc(scores, members)
    np.savez(how.out / "membership.npz", scores=scores, members=members, fpr=fprs, tpr=tprs)
    write_roc(how.out / "roc.png", fprs, tprs, title=f"{finding.info.get('test')}: AUC {out[MIA_AUC.key]:.3f}, "
                                                     f"{int(members.sum())} members, {int((~members).sum())} non-members")
    return out


@register_summary(20)
def membership_lines(privacy: dict[str, Any], threat: dict[str, Any]) -> list[tuple[str, str]]:
    """Membership inference."""
    lines: list[tuple[str, str]] = []
    if MIA_AUC.key in privacy:
        lines.append(("members", f"{privacy.get('mia_test')} test: AUC {MIA_AUC.shown(privacy)} "
                                 f"(chance 0.5), TPR {MIA_TPR_1.shown(privacy)} "
                                 f"[{MIA_TPR_1.shown(privacy, '_lo')}, "
                                 f"{MIA_TPR_1.shown(privacy, '_hi')}] at FPR 1 %, "
                                 f"{MIA_TPR_01.shown(privacy)} at 0.1 % "
                                 f"({privacy.get(MIA_MEMBERS.key)} members, {privacy.get(MIA_NON_MEMBERS.key)} "
                                 + ("excluded canaries)" if str(privacy.get("mia_test")).endswith("_canaries")
                                    else "non-members: (round, client) pairs)" if MIA_AUC_INFORMED.key in privacy
                                    else "class-matched non-members)")))
        if MIA_AUC_INFORMED.key in privacy:
            lines.append(("", f"knowing only each client's classes: AUC "
                              f"{MIA_AUC_INFORMED.shown(privacy)}, TPR "
                              f"{MIA_TPR_1_INFORMED.shown(privacy)} at FPR 1 % (the same test "
                              "on test-split records of their classes)"))
    return lines
