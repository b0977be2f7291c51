"""Record-level canaries in a client's DP-SGD, the evaluator's side (``record_canary_client`` plants them): each
round the host client trained, its release (the model it received less the model it uploaded) is projected on every
canary's direction and on ``UNSEEN`` directions no record sent, in clip norms of the round's mean step. Where the
step is plain SGD the auditor knows what each canary added when clipping works (its joined steps' scales times the
clip, along its signed direction) and takes it out of every projection but the canary's own, so that the canaries'
cross terms do not stand in for the noise. The matched filter of each canary's sign pattern, whitened by the unseen
directions' covariance across rounds (``canary_clients.estimate``: noise reused across rounds does not cancel there),
gives mu-GDP of a record over the rounds observed and an empirical epsilon, set against the epsilon the host's Opacus
accountant gives; where the scale is known the measured noise and shift are also set against the setting's."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from privbench.app_audit.record_canary_client import Planted, planned_noise, planned_shift, unit
from privbench.app_audit.simulation import AppRun
from privbench.defenses.client_dp.canary_clients import CHUNK, CanaryClients, Estimate, estimate

#: Directions no record sends: the projections' null distribution.
UNSEEN = 1000


def _key(arrays: dict[str, torch.Tensor], name: str) -> str | None:
    """The key of the parameter ``name`` among a message's arrays: itself, as Opacus's wrapper names it, or under a
    record's key."""
    for candidate in (name, f"_module.{name}"):
        if candidate in arrays:
            return candidate
    keys = [k for k in arrays if k.split("/")[-1] in (name, f"_module.{name}")]
    return keys[0] if len(keys) == 1 else None


def _release(run: AppRun, node: int, planted: Planted) -> tuple[torch.Tensor | None, str]:
    """The model the host received for the round less the model it uploaded, over the canaries' parameters, or why
    not."""
    def arrays(direction: str) -> dict[str, torch.Tensor] | None:
        return next((m.arrays for m in run.messages if m.direction == direction and m.kind == "train"
                     and m.node == node and m.round == planted.round and m.arrays and not m.error), None)

    sent, upload = arrays("down"), arrays("up")
    if sent is None or upload is None:
        return None, f"round {planted.round}: no model sent to the host or no upload from it"
    flat = []
    for name in planted.names:
        a, b = _key(sent, name), _key(upload, name)
        if a is None or b is None:
            return None, (f"round {planted.round}: the DP optimizer's parameter {name} is not among the arrays sent "
                          "and uploaded (the upload is not the model the DP-SGD trained)")
        flat.append(sent[a].double().flatten() - upload[b].double().flatten())
    return torch.cat(flat), ""


def scores(run: AppRun, node: int, planted: list[Planted], *, count: int, seed: int,
           unseen: int = UNSEEN) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Projections in ``unit`` (the clip times the step's scale, averaged over the round's steps: one clipped record's
    move in a mean step), canaries x rounds, then the unseen directions', and signs,
    per round the host's release was read; and why rounds were left out."""
    kept, left = [], []
    for p in planted:
        release, why = _release(run, node, p)
        if release is None:
            left.append(why)
            continue
        kept.append((p, release))
    total = count + unseen
    z, s = np.zeros((total, len(kept))), np.zeros((total, len(kept)))
    if not kept:
        return z[:count], z[count:], s[:count], s[count:], left
    first = kept[0][0]
    canaries = CanaryClients(count, shapes={n: torch.Size(sh) for n, sh in zip(first.names, first.shapes)}, seed=seed)
    prepared = []
    for p, release in kept:
        signs = np.array([canaries.sign(j, p.round) for j in range(total)])
        if p.weights is not None and p.step_scales:
            own = np.array(p.weights) * signs[:count]  # what each canary added along its direction
            known = torch.zeros_like(release)
            for start in range(0, count, CHUNK):
                stop = min(start + CHUNK, count)
                known += torch.from_numpy(own[start:stop]) @ canaries.directions(start, stop)
            prepared.append((release - known, np.concatenate([own, np.zeros(unseen)]), unit(p), signs))
        else:  # a step that is not plain SGD: its scale is unknown, the projections are in clip norms of the release
            prepared.append((release, np.zeros(total), unit(p), signs))
    for start in range(0, total, CHUNK):
        stop = min(start + CHUNK, total)
        u = canaries.directions(start, stop)
        for i, (base, own, scale, signs) in enumerate(prepared):
            z[start:stop, i] = ((u @ base).numpy() + own[start:stop]) / scale
            s[start:stop, i] = signs[start:stop]
    return z[:count], z[count:], s[:count], s[count:], left


def verdict(est: Estimate, *, claimed: float, shift: float, noise: float, unseen: int, spread: float,
            null: float) -> str:
    """One line: the estimate against the accountant's epsilon (BROKEN where the 99.5 % lower end passes it), then
    every defect the diagnostics point to: noise reused across rounds and, where the scale is known (``noise``
    finite), less noise than the setting's or a canary moving the release more than clipping allows (``spread``
    and ``null``: the standard deviations of a canary's and of an unseen direction's signed projection in a round;
    the shift is the difference of their means, so both errors bound it)."""
    from scipy import stats

    low, high = est.epsilon_interval
    if math.isnan(est.epsilon) or math.isnan(est.epsilon_alarm):
        return "undetermined: the canaries' projections gave no estimate (no noise and no signal, or a failed fit)"
    reused = (f"the noise of different rounds is correlated ({est.round_correlation:.2f}): noise reused across "
              "rounds (a generator seeded alike each round; Opacus draws its noise from torch's unless secure_mode), "
              "so the rounds do not compose as the accountant assumes") if est.round_correlation > 0.3 else ""
    found = []
    if math.isfinite(noise):
        upper = est.noise * math.sqrt((unseen - 1) / stats.chi2.ppf(0.005, unseen - 1))
        if upper < 0.8 * noise:
            found.append(f"the release carries {est.noise:.3g} step units of noise along a direction (99.5 % upper "
                         f"end {upper:.3g}), the engine's noise multiplier gives {noise:.3g}: the DP optimizer adds "
                         "less noise than its accountant is told")
        rounds = max(est.rounds, 1)
        error = math.sqrt(spread ** 2 / (max(est.canaries, 1) * rounds) + null ** 2 / (max(unseen, 1) * rounds))
        floor = est.shift - stats.norm.ppf(0.995) * error
        if floor > 1.25 * shift + 0.05:
            found.append(f"a canary moved the release by {est.shift:.3g} step units a round (99.5 % lower end "
                         f"{floor:.3g}) where its joins at the accountant's rate, clipped, move it by {shift:.3g}: "
                         "records' gradients not clipped")
    if est.epsilon_alarm > claimed:
        head = (f"BROKEN: empirical epsilon {est.epsilon:.2f} [{low:.2f}, {high:.2f}] of a record exceeds the "
                f"accountant's {claimed:.2f} (99.5 % lower end {est.epsilon_alarm:.2f})")
        why = [w for w in (reused, *found) if w] or ["no diagnostic singles out the defect"]
        return "; ".join([head, *why])
    if found:
        return "BROKEN: " + "; ".join(found)
    where = "holds" if high >= claimed else "lies below"
    return (f"consistent with the accountant: {est.epsilon:.2f} [{low:.2f}, {high:.2f}] {where} its {claimed:.2f} "
            "(a lower bound of this DP-SGD, not a proof of the claim)")


def host_node(run: AppRun, host: int) -> int | None:
    """The SuperNode of partition ``host``."""
    return next((node for node, partition in run.partitions.items() if partition == host), None)


def measure(run: AppRun, found: list[dict[str, Any]], *, delta: float, unseen: int = UNSEEN) -> dict[str, Any] | None:
    """The canary records' empirical epsilon of the host's DP-SGD against its accountant's; None when the audit
    planted none."""
    plan = run.record_plan
    if plan is None:
        return None
    node = host_node(run, plan.host)
    out: dict[str, Any] = {"canaries": plan.count, "unseen": unseen, "host": f"client{plan.host}", "node": node,
                           "scale": plan.scale, "delta": delta}
    notes = [n["record_canaries"] for n in run.notes if n["node"] == node and n["type"] == "train"
             and n.get("record_canaries")]
    planted = [Planted(**d) for d in notes]
    problems = sorted({p.problem for p in planted if p.problem})
    riding = [p for p in planted if not p.problem]
    if not riding:
        out["verdict"] = "not estimated: " + (problems[0] if problems else f"client{plan.host} trained no round")
        return out
    assert node is not None  # its notes were found by it
    z_in, z_out, s_in, s_out, left = scores(run, node, riding, count=plan.count, seed=plan.seed, unseen=unseen)
    out["rounds_left_out"] = left + [f"round {p.round}: {p.problem}" for p in planted if p.problem]
    if z_in.shape[1] == 0:
        out["verdict"] = "not estimated: " + left[0]
        return out
    row = next((m for m in found if m.get("mechanism") == "Opacus DP-SGD" and m.get("client") == out["host"]), {})
    claimed, delta = float(row.get("epsilon_measured") or math.inf), float(row.get("delta", delta))
    est = estimate(z_in, z_out, s_in, s_out, delta=delta, seed=plan.seed)  # at the delta its accountant's is
    linear = all(p.step_scales for p in riding)
    shift = float(np.mean([planned_shift(p) for p in riding]))
    noise = float(np.mean([planned_noise(p) for p in riding])) if linear else math.nan
    spread = float((s_in * z_in).std(ddof=1)) if z_in.size > 1 else math.inf
    null = float((s_out * z_out).std(ddof=1)) if z_out.size > 1 else math.inf
    out.update(est.as_dict())
    out.update({"delta": delta, "rounds_observed": [p.round for p in riding], "steps": [p.steps for p in riding],
                "sample_rate": riding[0].sample_rate, "optimizer": riding[0].optimizer,
                "noise_multiplier": sorted({z for p in riding for z in p.noise_multipliers}),
                "clip": sorted({c for p in riding for c in p.clips}),
                "scale_known": linear, "shift_planned": shift, "noise_planned": noise if linear else None,
                "mu_planned": shift / noise * math.sqrt(len(riding)) if linear else None,
                "joins_per_round": float(np.mean([np.mean(p.joined) for p in riding])),
                "epsilon_accountant": claimed,
                "verdict": verdict(est, claimed=claimed, shift=shift, noise=noise, unseen=unseen, spread=spread,
                                   null=null)})
    return out
