"""The attack phase of an audit: each audited client's payload given to the attack as its view, the finding
scored against the truth and chance."""
from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.attacks.findings import Finding
from privbench.audit.games import Play, game_for
from privbench.audit.plan import Plan
from privbench.audit.score import Scoring, Truth, score_finding
from privbench.data import FederatedData
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
from privbench.payloads import PayloadStore
from privbench.victim import Victim


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
    plays = game_for(p.attack.view).stage(p, store, model, data, clients)
    findings = p.attack.attack_many([play.view for play in plays], seed=p.seed)
    scored = []
    for play, finding, folder in zip(plays, findings, dirs):
        threat = {"server": "honest-but-curious", "aggregation": _server_view(p), **play.view.knowledge}
        spent = p.attack.budget()
        if spent:
            threat["attack_budget"] = {"attack": p.attack.name, **spent}
        scored.append((score_play(p, play, finding, data, folder), threat, play.payload.nbytes))
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


def score_play(p: Any, play: Play, finding: Finding, data: FederatedData, folder: Path) -> dict[str, Any]:
    """The privacy figures of ``finding`` on ``play``: its truth (the train images ``play.records`` of ``data``, and
    the evaluator's answer on top) scored by the scorer of the finding's type, files written into ``folder``. ``p``:
    the audit's plan, or any setting with its ``cfg``, ``attack`` and ``seed`` (a file attack's)."""
    truth = replace(_truth(play.records, data), **play.answer)
    how = Scoring(seed=p.seed, match_on=str(p.cfg.metrics.match_on), use_lpips=bool(p.cfg.metrics.lpips),
                  out=folder, recovered=Recovered.of(p.cfg.metrics))
    return score_finding(finding, play.view, p.attack, truth, how)


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
    outside, outside_labels = data.test.images.cpu(), data.test.labels.cpu()
    pool = data.chance_pool
    shown = np.isin(indices, pool) if pool is not None else np.zeros(0, dtype=bool)
    if pool is not None and shown.any():  # victim.photos: the set's other ones
        rest = torch.from_numpy(np.setdiff1d(pool, indices))
        photos, photo_labels = data.train.images.cpu()[rest], labels[rest]
        if shown.all():
            outside, outside_labels = photos, photo_labels
        else:  # a message of both domains (an aggregate) draws from both
            outside, outside_labels = torch.cat([outside, photos]), torch.cat([outside_labels, photo_labels])
    return Truth(images=data.train.images[index.to(data.train.images.device)].cpu().float() / 255.0,
                 labels=labels[index], non_members=outside.float() / 255.0, non_member_labels=outside_labels,
                 class_frequencies=counts / counts.sum(), mean=data.train.mean, std=data.train.std)


def _server_view(p: Plan) -> str:
    """What the run's aggregation lets the server see of the uploads."""
    aggregation = p.protocol.aggregation
    if aggregation.seals:
        return f"{aggregation.name}: each cohort's weighted mean only, never a client's upload"
    return f"{aggregation.name}: every upload as sent"
