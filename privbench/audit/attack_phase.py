"""The attack phase of an audit: each audited client's payload attacked, scored against the truth and chance."""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.attacks import AttackTarget, GradientInversion, SubspaceProjection
from privbench.attacks.base import AttackResult
from privbench.audit.plan import Plan
from privbench.audit.score import score_reconstruction
from privbench.data import FederatedData
from privbench.errors import AttackNotApplicableError
from privbench.payloads import Payload, PayloadStore
from privbench.pixels import denormalise
from privbench.victim import Victim


def attack_victims(p: Plan, store: PayloadStore, model: nn.Module, data: FederatedData,
                   out: Path) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Attack the victim's payload (and with ``victim.clients`` every audited client's, each on its own).

    Several victims go to the attack together (``run_many``: Inverting Gradients batches them).
    Returns the headline victim's privacy (with ``victims``: one row per audited client, their
    spread and victims per second), its threat model and its payload's bytes.
    """
    start = time.perf_counter()
    clients = [p.victim.client] if p.victim.clients is None else _audited(p.victim, store)
    dirs = [out] + [out / "victims" / f"client{c}" for c in clients[1:]]
    selected = [p.choice.select(store, p.victim.alone(c)) for c in clients]
    truths = [p.choice.truth(store, payload) for payload, _ in selected]
    if isinstance(p.attack, SubspaceProjection):
        scored = [_project(p, p.attack, payload, truth, data, d) for (payload, _), truth, d in
                  zip(selected, truths, dirs)]
    elif isinstance(p.attack, GradientInversion):
        targets = [_target(p, p.victim.alone(c), payload, base, model, data) for c, (payload, base) in
                   zip(clients, selected)]
        results = p.attack.run_many(targets, seed=p.seed)
        scored = [(_scored(p, truth, result, data, d), dict(target.knowledge), payload.nbytes)
                  for (payload, _), truth, target, result, d in zip(selected, truths, targets, results, dirs)]
    else:
        raise AttackNotApplicableError(f"attack={p.attack.name} has no way to read payload={selected[0][0].kind}")
    privacy, threat, nbytes = scored[0]
    if p.victim.clients is None:
        return privacy, threat, nbytes
    seconds = time.perf_counter() - start
    rows = [_victim_row(c, one_threat, one) for c, (one, one_threat, _) in zip(clients, scored)]
    psnrs = [r["psnr_mean"] for r in rows if r.get("psnr_mean") is not None and math.isfinite(r["psnr_mean"])]
    privacy["victims"] = rows
    privacy["victims_summary"] = {
        "count": len(rows), "psnr_mean": float(np.mean(psnrs)) if psnrs else None,
        "psnr_min": min(psnrs, default=None), "psnr_max": max(psnrs, default=None),
        "above_chance": sum(1 for r in rows if (r.get("psnr_gain") or 0) > 0),
        "seconds": seconds, "victims_per_second": len(rows) / seconds}
    return privacy, threat, nbytes


def _audited(victim: Victim, store: PayloadStore) -> list[int]:
    """The audited clients of the victim round, the headline victim first: the senders of its audit gradients."""
    senders = {int(r["sender"].removeprefix("client"))
               for r in store.records(kind="gradient", round=victim.round, phase="training")}
    senders |= set(victim.listed) if victim.clients != "all" else set()
    return [victim.client, *sorted(c for c in senders if c != victim.client and victim.audits(c))]


def _victim_row(client: int, threat: dict[str, Any], privacy: dict[str, Any]) -> dict[str, Any]:
    keys = ("failed", "objective", "psnr_mean", "psnr_chance", "psnr_gain", "ssim_mean", "ssim_chance", "lpips_mean",
            "lpips_chance", "label_accuracy", "num_reconstructed", "num_true")
    return {"client": client, "payload": threat.get("payload"), **{k: privacy.get(k) for k in keys}}


def _target(p: Plan, victim: Victim, payload: Payload, base: Payload | None, model: nn.Module,
            data: FederatedData) -> AttackTarget:
    """The attacker's view of ``victim``'s payload."""
    assert isinstance(p.attack, GradientInversion)
    count = p.choice.images(payload, victim, unroll=p.attack.unroll)
    return AttackTarget.from_payload(payload, base=base, model=model, num_images=count, image_shape=data.train.shape,
                                     num_classes=data.train.num_classes, mean=data.train.mean, std=data.train.std,
                                     unroll=p.attack.unroll)


def _scored(p: Plan, truth: list[int], result: AttackResult, data: FederatedData, out: Path) -> dict[str, Any]:
    """The attack's record and, when it rebuilt images, their scores (grid and gallery written to ``out``)."""
    privacy: dict[str, Any] = {"failed": result.failed, "objective": result.objective,
                               "label_source": result.label_source, "attempts": result.attempts}
    if result.images is not None and result.labels is not None:
        out.mkdir(parents=True, exist_ok=True)
        recon = denormalise(result.images.cpu(), data.train.mean, data.train.std)  # scored on the CPU
        privacy.update(_score(p, recon, result.labels.cpu(), *_truth(truth, data), data, out))
    return privacy


def _truth(truth: list[int], data: FederatedData) -> tuple[torch.Tensor, torch.Tensor]:
    """The train images at ``truth`` (``[N, C, H, W]`` in [0, 1], on the CPU) and their labels."""
    index = torch.tensor(truth, dtype=torch.long)
    return data.train.images[index.to(data.train.images.device)].cpu().float() / 255.0, data.train.labels[index].cpu()


def _score(p: Plan, recon: torch.Tensor, labels: torch.Tensor, truth: torch.Tensor, truth_labels: torch.Tensor,
           data: FederatedData, out: Path) -> dict[str, Any]:
    """Match ``recon`` one-to-one against ``truth`` (the images the payload was computed from); score it and the chance
    baselines with the same matching; write the grid."""
    test = data.test.images.cpu().float() / 255.0
    return score_reconstruction(recon, labels, truth, truth_labels, non_members=test, seed=p.seed,
                                match_on=str(p.cfg.metrics.match_on), use_lpips=bool(p.cfg.metrics.lpips), out=out)


def _project(p: Plan, attack: SubspaceProjection, payload: Payload, indices: list[int], data: FederatedData,
             out: Path) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The projection attack on a ``subspace`` payload: basis images scored like reconstructions."""
    assert payload.tensors is not None
    out.mkdir(parents=True, exist_ok=True)
    basis = payload.tensors["U"]
    recon = attack.basis_images(basis, data.train.shape)
    truth, truth_labels = _truth(indices, data)
    scores = _score(p, recon, torch.full((len(recon),), -1), truth, truth_labels, data, out)
    scores["label_accuracy"] = float("nan")  # a basis carries no labels
    privacy = {"failed": False, "label_source": "none", **scores,
               **attack.evaluate(basis, truth, mean=data.train.mean, std=data.train.std)}
    threat = {"payload": payload.id, "payload_kind": payload.kind, "visible_names": ["U"],
              "basis_shape": list(basis.shape), "labels": "not given"}
    return privacy, threat, payload.nbytes
