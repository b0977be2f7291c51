"""The attack phase of an audit: each audited client's payload given to the attack as its view, the finding
scored against the truth and chance."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.attacks.active.views import ActiveView
from privbench.attacks.labels.views import LabelView
from privbench.attacks.membership.findings import MembershipScores
from privbench.attacks.membership.views import MembershipView, SourceView
from privbench.attacks.target import AttackTarget
from privbench.attacks.views import BasisView, ModelView, ViewKind
from privbench.audit.plan import Plan
from privbench.audit.score import Scoring, Truth, score_finding
from privbench.data import FederatedData
from privbench.errors import AttackNotApplicableError
from privbench.figures import (
    CLASS_PROPORTION_ERROR,
    CLASS_PROPORTION_ERROR_CHANCE,
    CLASS_PROPORTION_ERROR_SET,
    LABEL_ACCURACY,
    LABEL_SET_EXACT,
    LABEL_SET_EXACT_CHANCE,
    LABEL_SET_JACCARD,
    LABEL_SET_JACCARD_CHANCE,
    LPIPS_CHANCE,
    LPIPS_MEAN,
    MIA_AUC,
    MIA_TPR_1,
    NUM_RECONSTRUCTED,
    NUM_TRUE,
    PSNR_CHANCE,
    PSNR_GAIN,
    PSNR_MEAN,
    SSIM_CHANCE,
    SSIM_MEAN,
)
from privbench.metrics.reconstruction import Recovered
from privbench.payloads import LocalTraining, Payload, PayloadStore
from privbench.pixels import normalise
from privbench.victim import Victim

#: How the attacker's view of a payload is built, by the view an attack asks for (``Attack.view``).
ViewBuilder = Callable[[Plan, Victim, Payload, "Payload | None", nn.Module, FederatedData], Any]


def _gradient_view(p: Plan, victim: Victim, payload: Payload, base: Payload | None, model: nn.Module,
                   data: FederatedData) -> AttackTarget:
    count = p.choice.images(payload, victim, unroll=p.attack.unroll)
    return AttackTarget.from_payload(payload, base=base, model=model, num_images=count, image_shape=data.train.shape,
                                     num_classes=data.train.num_classes, mean=data.train.mean, std=data.train.std,
                                     unroll=p.attack.unroll)


def _model_view(p: Plan, victim: Victim, payload: Payload, base: Payload | None, model: nn.Module,
                data: FederatedData) -> ModelView:
    return ModelView.from_payload(payload, base=base, model=model, num_classes=data.train.num_classes,
                                  image_shape=data.train.shape, mean=data.train.mean, std=data.train.std)


def _basis_view(p: Plan, victim: Victim, payload: Payload, base: Payload | None, model: nn.Module,
                data: FederatedData) -> BasisView:
    images = normalise(data.test.images.cpu().float() / 255.0, data.train.mean, data.train.std)
    return BasisView.from_payload(payload, image_shape=data.train.shape, mean=data.train.mean, std=data.train.std,
                                  public=(images, data.test.labels.cpu()))


def _labels_view(p: Plan, victim: Victim, payload: Payload, base: Payload | None, model: nn.Module,
                 data: FederatedData) -> LabelView:
    """The gradient view and labelled public data: ``attack.public`` test-split images (no client holds them)."""
    target = _gradient_view(p, victim, payload, base, model, data)
    return LabelView.from_test_split(target, data.test.images, data.test.labels,
                                     count=int(getattr(p.attack, "public", 2000)), seed=p.seed,
                                     mean=data.train.mean, std=data.train.std)


VIEWS: dict[ViewKind, ViewBuilder] = {"gradient": _gradient_view, "model": _model_view, "basis": _basis_view,
                                      "labels": _labels_view}


def membership_game(p: Plan, members: list[int], payload: Payload, base: Payload | None, model: nn.Module,
                    data: FederatedData) -> tuple[MembershipView, torch.Tensor]:
    """The membership game of one message: its training records (at most half of ``attack.max_candidates``) and as
    many test-split records of the same classes, shuffled; the view, and which candidates are members (the
    evaluator's). Members whose class has no test record left are not used. The classes' other test records are
    the attacker's population (shadow training)."""
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
    images = torch.cat([data.train.images[torch.tensor(kept, device=data.train.images.device)].cpu(),
                        data.test.images[torch.tensor(partners, device=data.test.images.device)].cpu()]).float() / 255.0
    labels = torch.cat([train_labels[kept], test_labels[partners]])
    is_member = torch.cat([torch.ones(len(kept), dtype=torch.bool), torch.zeros(len(partners), dtype=torch.bool)])
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
                                            "test-split records of the same classes, shuffled", population=population)
    return view, is_member[order]


def source_game(p: Plan, payload: Payload, model: nn.Module, data: FederatedData,
                store: PayloadStore) -> tuple[SourceView, dict[str, torch.Tensor]]:
    """Source inference on ``payload``'s round: every client's upload of that kind and round whose tensors were kept
    (each as the server reconstructs it on its download), and at most ``attack.max_candidates`` of their training
    records, drawn evenly from the clients; the view, and each record's client and how many clients hold its class
    (the evaluator's)."""
    senders = sorted({int(r["sender"].removeprefix("client")) for r in store.records(
        kind=payload.kind, round=payload.round, phase="training") if r.get("stored")})
    if len(senders) < 2:
        raise AttackNotApplicableError(f"attack=source compares the clients' uploads of round {payload.round}: "
                                       f"{len(senders)} {payload.kind} was kept (set capture.clients=all)")
    generator = torch.Generator().manual_seed(p.seed * 7919 + 61)
    weights, pools, classes = [], [], []
    for c in senders:
        upload, base = p.choice.select(store, p.victim.alone(c))
        assert upload.tensors is not None
        weights.append({**(base.tensors if base is not None and base.tensors is not None else {}), **upload.tensors})
        own = torch.tensor(sorted(set(p.choice.truth(store, upload))), dtype=torch.long)
        pools.append(own[torch.randperm(len(own), generator=generator)].tolist())
        classes.append(set(data.train.labels.cpu()[own].tolist()))
    budget = int(getattr(p.attack, "max_candidates", 500))
    rows: list[int] = []
    owners: list[int] = []
    while len(rows) < budget and any(pools):  # round-robin: every client's records alike
        for k, pool in enumerate(pools):
            if pool and len(rows) < budget:
                rows.append(pool.pop())
                owners.append(k)
    index = torch.tensor(rows, dtype=torch.long)
    labels = data.train.labels.cpu()[index]
    holders = torch.tensor([sum(int(y) in held for held in classes) for y in labels.tolist()])
    device = next(model.parameters()).device
    images = normalise(data.train.images[index.to(data.train.images.device)].cpu().float() / 255.0,
                       data.train.mean, data.train.std)
    clients = [f"client{c}" for c in senders]
    knowledge = {"payload": payload.id, "payload_kind": payload.kind, "round": payload.round, "clients": clients,
                 "records": f"{len(rows)} training records of those clients, drawn evenly, labels known",
                 "server": "honest-but-curious: it holds every client's upload of the round"}
    given = classes if getattr(p.attack, "prior", "none") == "classes" else None
    if given is not None:
        knowledge["client_classes"] = "given: the true class sets (an upper bound on what a class-set attack infers)"
    view = SourceView(model, weights, clients, images.to(device), labels.to(device), knowledge, given)
    return view, {"owners": torch.tensor(owners), "holders": holders}


def attack_victims(p: Plan, store: PayloadStore, model: nn.Module, data: FederatedData,
                   out: Path) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Attack the victim's payload (and with ``victim.clients`` every audited client's, each on its own).

    Every view goes to the attack in one call (``attack_many``: Inverting Gradients batches them).
    Returns the headline victim's privacy (with ``victims``: one row per audited client, their
    spread and victims per second), its threat model and its payload's bytes.
    """
    start = time.perf_counter()
    clients = [p.victim.client] if p.victim.clients is None else _audited(p.victim, store)
    dirs = [out] + [out / "victims" / f"client{c}" for c in clients[1:]]
    answers: list[dict[str, Any]] = [{} for _ in clients]  # the evaluator's side of a game, by Truth field
    views: list[Any] = []
    if p.attack.view == "participation":  # did each client take part in each observed aggregate's round
        selected, views, answers = _participation(p, model, data, store)
    else:
        selected = [p.choice.select(store, p.victim.alone(c)) for c in clients]
    if p.attack.view == "membership":
        games = [membership_game(p, p.choice.truth(store, payload), payload, base, model, data)
                 for payload, base in selected]
        views = [view for view, _ in games]
        answers = [{"membership": answer} for _, answer in games]
    elif p.attack.view == "source":  # which client holds each record: every client's upload of the round
        sources = [source_game(p, payload, model, data, store) for payload, _ in selected]
        views = [view for view, _ in sources]
        answers = [answer for _, answer in sources]
    elif p.attack.view == "canaries":  # a one-run DP audit: the victim's round rerun with gradient canaries
        from privbench.audit.one_run import canary_round
        from privbench.progress import phase

        audits = []
        with phase(f"one-run audit: the victim's round rerun with {int(getattr(p.attack, 'canaries'))} canaries",
                   total=len(selected), unit="round") as bar:
            for payload, base in selected:
                audits.append(canary_round(p, payload, base, model, data, p.choice.truth(store, payload)))
                bar.update(1)
        views = [view for view, _ in audits]
        answers = [{"membership": answer} for _, answer in audits]
    elif p.attack.view == "active":  # the server crafts each victim's download; the victim's round runs on it
        from privbench.audit.active import active_round

        views = [active_round(p, payload, base, model, data, p.choice.truth(store, payload),
                              _members(store, payload) if payload.kind == "aggregate" else ())
                 for payload, base in selected]
    elif p.attack.view != "participation":
        build = VIEWS[p.attack.view]
        views = [build(p, p.victim.alone(c), payload, base, model, data) for c, (payload, base) in zip(clients, selected)]
    findings = p.attack.attack_many(views, seed=p.seed)
    scored = []
    for (payload, _), view, finding, folder, answer in zip(selected, views, findings, dirs, answers):
        records = [] if p.attack.view == "participation" else p.choice.truth(store, payload)
        if isinstance(view, ActiveView) and view.target is not None:  # an active server isolated one member
            records = list(view.target)
        truth = replace(_truth(records, data), **answer)
        how = Scoring(seed=p.seed, match_on=str(p.cfg.metrics.match_on), use_lpips=bool(p.cfg.metrics.lpips),
                      out=folder, recovered=Recovered.of(p.cfg.metrics))
        threat = {"server": "honest-but-curious", "aggregation": _server_view(p), **view.knowledge}
        spent = p.attack.budget()
        if spent:
            threat["attack_budget"] = {"attack": p.attack.name, **spent}
        scored.append((score_finding(finding, view, p.attack, truth, how), threat, payload.nbytes))
    privacy, threat, nbytes = scored[0]
    if p.victim.clients is None:
        return privacy, threat, nbytes
    seconds = time.perf_counter() - start
    rows = [_victim_row(c, one_threat, one) for c, (one, one_threat, _) in zip(clients, scored)]
    psnrs = [r[PSNR_MEAN.key] for r in rows if r.get(PSNR_MEAN.key) is not None and math.isfinite(r[PSNR_MEAN.key])]
    privacy["victims"] = rows
    privacy["victims_summary"] = {
        "count": len(rows), PSNR_MEAN.key: float(np.mean(psnrs)) if psnrs else None,
        "psnr_min": min(psnrs, default=None), "psnr_max": max(psnrs, default=None),
        "above_chance": sum(1 for r in rows if (r.get(PSNR_GAIN.key) or 0) > 0),
        **{f.key: float(np.mean([r[f.key] for r in rows]))
           for f in (LABEL_SET_EXACT, CLASS_PROPORTION_ERROR, CLASS_PROPORTION_ERROR_CHANCE, MIA_AUC)
           if all(r.get(f.key) is not None for r in rows)},
        "seconds": seconds, "victims_per_second": len(rows) / seconds}
    return privacy, threat, nbytes


def _participation(p: Plan, model: nn.Module, data: FederatedData, store: PayloadStore
                   ) -> tuple[list[tuple[Payload, Payload | None]], list[Any], list[dict[str, Any]]]:
    """The participation game's one view, its first aggregate as the attacked payload, and the evaluator's answer:
    who took part, and the same test's scores on records that carry only each client's classes."""
    from privbench.audit.participation import participation_game

    view, twins, took_part, first = participation_game(p, model, data, store)
    informed = p.attack.attack(twins, seed=p.seed)
    if not isinstance(informed, MembershipScores):
        raise TypeError(f"attack={p.attack.name} answered the participation game with {type(informed).__name__}, "
                        "not membership scores")
    return [(first, None)], [view], [{"membership": took_part, "informed_scores": informed.scores}]


def _audited(victim: Victim, store: PayloadStore) -> list[int]:
    """The audited clients of the victim round, the headline victim first: the senders of its audit gradients."""
    senders = {int(r["sender"].removeprefix("client"))
               for r in store.records(kind="gradient", round=victim.round, phase="training")}
    senders |= set(victim.listed) if victim.clients != "all" else set()
    return [victim.client, *sorted(c for c in senders if c != victim.client and victim.audits(c))]


def _victim_row(client: int, threat: dict[str, Any], privacy: dict[str, Any]) -> dict[str, Any]:
    keys = ("failed", "objective", PSNR_MEAN.key, PSNR_CHANCE.key, PSNR_GAIN.key, SSIM_MEAN.key, SSIM_CHANCE.key, LPIPS_MEAN.key,
            LPIPS_CHANCE.key, LABEL_ACCURACY.key, NUM_RECONSTRUCTED.key, NUM_TRUE.key)
    other = (LABEL_SET_EXACT.key, LABEL_SET_EXACT_CHANCE.key, LABEL_SET_JACCARD.key, LABEL_SET_JACCARD_CHANCE.key,
             "inferred_classes", CLASS_PROPORTION_ERROR.key, CLASS_PROPORTION_ERROR_CHANCE.key,
             CLASS_PROPORTION_ERROR_SET.key, MIA_AUC.key, MIA_TPR_1.key)  # a property or membership attack's figures
    return {"client": client, "payload": threat.get("payload"), **{k: privacy.get(k) for k in keys},
            **{k: privacy[k] for k in other if k in privacy}}


def _truth(indices: list[int], data: FederatedData) -> Truth:
    """The evaluator's truth for a message computed from train images ``indices``."""
    index = torch.tensor(indices, dtype=torch.long)
    labels = data.train.labels.cpu()
    counts = torch.bincount(labels.long(), minlength=data.train.num_classes).double()
    return Truth(images=data.train.images[index.to(data.train.images.device)].cpu().float() / 255.0,
                 labels=labels[index], non_members=data.test.images.cpu().float() / 255.0,
                 non_member_labels=data.test.labels.cpu(),
                 class_frequencies=counts / counts.sum(), mean=data.train.mean, std=data.train.std)


def _server_view(p: Plan) -> str:
    """What the run's aggregation lets the server see of the uploads."""
    aggregation = p.protocol.aggregation
    if aggregation.seals:
        return f"{aggregation.name}: each cohort's weighted mean only, never a client's upload"
    return f"{aggregation.name}: every upload as sent"


def _members(store: PayloadStore, aggregate: Payload) -> list[tuple[str, list[int], LocalTraining]]:
    """Each member of a secure aggregate's cohort: its name, its images (the evaluator's truth), its declared training."""
    return [(rec["sender"], store.truth(rec["id"]), LocalTraining.from_dict(rec["training"]))
            for rec in store.records(kind="masked_upload", round=aggregate.round, cluster=aggregate.cluster)]
