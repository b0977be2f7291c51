"""Canary clients in a Flower app, the server's side (``canary_client`` is the client's): plan them when the first
train message is about to leave (the clip of the client-level mechanism the app runs), and after the run read
every round's release along each canary's direction, in clip units:

- central DP (a Flower DP wrapper around the strategy): the model the server sends next less the model it sent for
  the round, times the number of updates it received (the wrapper's mean as a sum, uniform weights);
- local DP (``LocalDpMod``): each canary's own upload less the model it received.

Canaries that the strategy did not send to in a round are scored with sign 0 there; ``UNSEEN`` directions that no
client ever sends give the null distribution. A Gaussian fit of the draws (``fit``: Student's t over the canaries,
the per-round shift composed over the rounds) gives mu-GDP and an empirical epsilon, set against the epsilon the
mechanism's own setting gives over the rounds observed (``defenses.client_dp.canary_clients.verdict``). The canary
clients' partitions train nothing that reaches the server: the attacks leave them out (``AppRun.without``)."""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import torch

from privbench.app_audit.canary_client import CanaryPlan
from privbench.app_audit.privacy import client_mods
from privbench.app_audit.simulation import AppRun, Planner
from privbench.defenses.client_dp.canary_clients import CHUNK, CanaryClients, Estimate, verdict
from privbench.errors import ConfigError
from privbench.figures.one_run import EPSILON_CLAIMED
from privbench.metrics.one_run_fdp import gdp_epsilon

#: A canary's update is this many clip norms long (past the clip, so that clipping is tested too).
SCALE = 2.0
#: Directions no client sends: the scores' null distribution.
UNSEEN = 1000
#: The strategies whose next model is the (noised) mean of the updates they received.
MEANS = ("FedAvg", "FedProx")


def mechanism_clip(strategies: list[Any], client_app: Any) -> tuple[float, str, bool]:
    """The clip of the app's client-level DP mechanism (under adaptive clipping, its first), where it acts
    (``central`` or ``local``) and whether the clip adapts; one line when it runs none the canaries can measure."""
    for strategy in strategies:
        name = type(strategy).__name__
        if name.startswith("DifferentialPrivacy"):
            inner = type(getattr(strategy, "strategy", None)).__name__
            if inner not in MEANS:
                raise ConfigError(f"--canaries: {name} wraps {inner}, whose next model is not the mean of the "
                                  f"updates it received (the canaries read a release of {' or '.join(MEANS)})")
            return float(strategy.clipping_norm), "central", "AdaptiveClipping" in name
    for mod in client_mods(client_app):
        if type(mod).__name__ == "LocalDpMod":
            return float(mod.clipping_norm), "local", False
    raise ConfigError("--canaries: the app runs no client-level DP mechanism the canaries can measure (a Flower DP "
                      "wrapper around its strategy, or LocalDpMod on its ClientApp)")


def planner(count: int, partitions: int, *, seed: int, scale: float = SCALE) -> Planner:
    """What ``run_app`` calls before the first train message leaves: the plan of ``count`` canary clients."""
    def plan(strategies: list[Any], client_app: Any) -> CanaryPlan:
        clip, where, adaptive = mechanism_clip(strategies, client_app)
        return CanaryPlan(count, partitions, scale * clip, clip, seed, where, adaptive)
    return plan


def _clip_of(run: AppRun, plan: CanaryPlan, round_: int) -> float | None:
    """The clip round ``round_``'s updates were clipped to: the plan's, or under adaptive clipping the round's."""
    if not plan.adaptive:
        return plan.clip
    return run.clips.used(round_) if run.clips is not None else None


def _releases(run: AppRun, names: list[str]) -> dict[int, dict[str, Any]]:
    """Per train round: the model sent (float arrays ``names``), the model sent after it, the nodes sent to, and
    each node's upload."""
    out: dict[int, dict[str, Any]] = {}
    models = run.models
    for i, b in enumerate(models):
        if not b.message_type.startswith("train") or not b.same or b.round in out:
            continue
        later = next((m for m in models[i + 1:] if m.same and all(n in m.arrays for n in names)), None)
        nodes = {m.node for m in run.messages if m.direction == "down" and m.kind == "train" and m.round == b.round}
        replies = [m for m in run.messages if m.direction == "up" and m.kind == "train" and m.round == b.round]
        uploads = {m.node: m.arrays for m in replies if not m.error and all(n in m.arrays for n in names)}
        answered = Counter(m.node for m in replies if not m.error)  # SecAgg+: a reply to each of its stages
        counted = [n for n, k in answered.items() if k == max(answered.values())]
        weights = {m.node: m.metrics.get("num-examples") for m in replies if m.node in counted and not m.error}
        numeric = all(isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 for w in weights.values())
        out[b.round] = {"sent": b.arrays, "next": later.arrays if later is not None else None, "nodes": nodes,
                        "uploads": uploads, "count": len(counted), "weights": weights if numeric and weights else None}
    return out


def _names(run: AppRun) -> list[str]:
    """The floating arrays of the first model sent for training (what a canary's update moves), in order."""
    first = next((b for b in run.models if b.message_type.startswith("train")), None)
    return [n for n, t in first.arrays.items() if t.is_floating_point()] if first is not None else []


def _flat(arrays: dict[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    return torch.cat([arrays[n].double().flatten() for n in names])


def scores(run: AppRun, plan: CanaryPlan, *, unseen: int = UNSEEN,
           releases: dict[int, dict[str, Any]] | None = None) -> tuple[np.ndarray, ...]:
    """Each canary's projection per observed round in clip units (the round's clip, under adaptive clipping) and its
    sign (0 where it was not sent to): the inserted canaries' then the unseen directions' (``z_in, z_out, s_in,
    s_out``), and the rounds observed.

    What the inserted canaries add when clipping works (the clip along each one's signed direction: the auditor's
    own knowledge) is taken out of every vector projected, each canary's own part kept in its own projection, so that
    the canaries' cross terms (``clip / sqrt(dims)`` each) do not stand in for the mechanism's noise. ``releases``:
    ``_releases`` of the run, where the caller has them."""
    names = _names(run)
    releases = _releases(run, names) if releases is None else releases
    if not names or not releases:
        empty = np.empty((0, 0))
        return empty, empty, empty, empty, np.array([], dtype=int)
    first = next(iter(releases.values()))["sent"]
    canaries = CanaryClients(plan.count, shapes={n: first[n].shape for n in names}, seed=plan.seed)
    node_of = {j: node for node, j in run.canaries.items()}
    inserted = canaries.directions(0, plan.count)
    kept: list[tuple[int, dict[int, torch.Tensor], torch.Tensor, float]] = []  # own releases, noise rows, clip
    for r, rel in sorted(releases.items()):
        clip = _clip_of(run, plan, r)
        if clip is None:  # an adaptive clip not noted for the round: its canaries' parts are unknown
            continue
        sent = _flat(rel["sent"], names)
        joined = [j for j in range(plan.count) if node_of.get(j) in rel["nodes"]]
        planted = {j: clip * canaries.sign(j, r) * inserted[j] for j in joined}
        own: dict[int, torch.Tensor] = {}  # a canary's own release: its projection is not cleaned of its own part
        if plan.mechanism == "central":
            if rel["next"] is None:
                continue
            release = (_flat(rel["next"], names) - sent) * rel["count"]
            noise = [release - sum(planted.values(), torch.zeros_like(release))]
            own = {j: noise[0] + planted[j] for j in joined}
        else:
            own = {j: _flat(rel["uploads"][node_of[j]], names) - sent for j in joined
                   if node_of[j] in rel["uploads"]}
            noise = [own[j] - planted[j] for j in own]
            if not noise:
                continue
        kept.append((r, own, torch.stack(noise), clip))
    total = plan.count + unseen
    z, s = np.empty((total, len(kept))), np.zeros((total, len(kept)))
    for start in range(0, total, CHUNK):  # each direction drawn once, projected on every round's releases
        stop = min(start + CHUNK, total)
        u = canaries.directions(start, stop)
        for i, (r, own, noises, clip) in enumerate(kept):
            on_noise = (u @ noises.T).numpy()
            for j in range(start, stop):
                value = float(u[j - start] @ own[j]) if j in own else on_noise[j - start, j % len(noises)]
                z[j, i] = value / clip
                s[j, i] = canaries.sign(j, r) if (j in own or j >= plan.count) else 0.0
    k = plan.count
    return z[:k], z[k:], s[:k], s[k:], np.array([r for r, _, _, _ in kept], dtype=int)


def shares(run: AppRun, releases: dict[int, dict[str, Any]] | None = None) -> list[float]:
    """Each canary's share of a round's mean as FedAvg weighs it (``num-examples``), in units of ``1 / updates``
    (the share the wrapper's noise is calibrated for), per round it took part in; none where a weight is unknown."""
    out = []
    for rel in (_releases(run, _names(run)) if releases is None else releases).values():
        weights = rel["weights"]
        if weights is None:
            continue
        total = sum(weights.values())
        out += [rel["count"] * weights[node] / total for node in run.canaries if node in weights]
    return out


def fit(z_in: np.ndarray, z_out: np.ndarray, s_in: np.ndarray, s_out: np.ndarray, *, delta: float) -> Estimate:
    """mu-GDP of a client in every observed round, from the canaries' scores (canaries x rounds; sign 0 where a
    canary was not sent to). Each round's scores (projection times sign) are centred and scaled by the unseen
    directions' mean and spread that round (the lower ends allow for their error); every (canary, round) a canary
    was sent to is one draw of the round's mu, assumed the same each round (one setting); Student's t over those
    draws gives its interval (a handful of canaries proves little), and a client in all ``T`` rounds is ``sqrt(T)``
    times it (Gaussian mechanisms compose so). Round correlation of the unseen scores is the diagnostic of reused
    noise."""
    from scipy import stats

    null = s_out * z_out
    centre, spread = null.mean(axis=0), null.std(axis=0, ddof=1)
    joined = s_in != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        draws = ((s_in * z_in - centre) / spread)[joined]
    draws = np.where(np.isnan(draws), 0.0, draws)
    rounds, n = z_in.shape[1], int(joined.sum())
    per = float(draws.mean())
    half = float(draws.std(ddof=1)) / math.sqrt(n) if n > 1 and np.isfinite(draws).all() else 0.0
    q995, q975 = stats.t.ppf([0.995, 0.975], max(n - 1, 1))
    # the lower ends also allow for the unseen directions' own error: their spread at its 99.5 % upper bound and
    # their mean off by 2.6 of its standard errors (every draw of a round shares both)
    unseen = len(null)
    wide = math.sqrt((unseen - 1) / stats.chi2.ppf(0.005, unseen - 1)) if unseen > 1 else math.inf
    per_low = per / wide - stats.norm.ppf(0.995) / math.sqrt(max(unseen, 1))
    root = math.sqrt(rounds)
    mu, alarm = per * root, max(per_low - q995 * half / wide, 0.0) * root
    low, high = max(per_low - q975 * half / wide, 0.0) * root, (per + q975 * half) * root
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.nan_to_num(np.corrcoef(z_out, rowvar=False)) if rounds > 1 else np.eye(1)
    off = corr[~np.eye(len(corr), dtype=bool)]
    signal = (s_in * z_in)[joined]
    return Estimate(mu, (float(low), float(high)), gdp_epsilon(mu, delta=delta),
                    (gdp_epsilon(low, delta=delta), gdp_epsilon(high, delta=delta)), gdp_epsilon(alarm, delta=delta),
                    float(signal.mean() - centre.mean()), float(spread.mean()), float(off.mean()) if off.size else 0.0,
                    len(z_in), rounds)


def measure(run: AppRun, found: list[dict[str, Any]], *, delta: float, unseen: int = UNSEEN) -> dict[str, Any] | None:
    """The canary clients' empirical epsilon of the app's client-level mechanism, against the epsilon its setting
    gives over the rounds observed; None when the audit planned no canaries."""
    plan = run.canary_plan
    if plan is None:
        return None
    from privbench.defenses.calibration import epsilon

    out: dict[str, Any] = {"canaries": plan.count, "unseen": unseen, "norm": plan.norm, "clip": plan.clip,
                           "mechanism_kind": plan.mechanism, "nodes": sorted(run.canaries), "delta": delta}
    releases = _releases(run, _names(run))
    z_in, z_out, s_in, s_out, rounds = scores(run, plan, unseen=unseen, releases=releases)
    sent_to = np.abs(s_in).sum(axis=1) > 0 if s_in.size else np.zeros(0, dtype=bool)
    out["rounds_observed"] = [int(r) for r in rounds]
    if len(rounds) == 0 or int(sent_to.sum()) < 2:
        out["verdict"] = ("not estimated: fewer than two canaries were sent to in a round whose release the server "
                          "sent on (a central release is read from the next model sent)")
        return out
    est = fit(z_in[sent_to], z_out, s_in[sent_to], s_out, delta=delta)
    planned, claim, name = _planned(found, plan, rounds=len(rounds))
    accounted = epsilon(planned, [(1.0, len(rounds))], delta=delta) if planned > 0 else math.inf
    out.update(est.as_dict())
    said = verdict(est, claimed=accounted, planned_noise=planned)
    weighed = shares(run, releases) if plan.mechanism == "central" else []
    out["canary_share"] = float(np.mean(weighed)) if weighed else None
    if weighed and max(abs(f - 1) for f in weighed) > 0.05:
        said += (f"; FedAvg weighs the updates by num-examples: the canaries' shares of the mean are "
                 f"{min(weighed):.2f}-{max(weighed):.2f} times the 1 / updates its noise is calibrated for (a "
                 "client with more records than the mean loses more privacy than the setting says)")
    out.update({"of": name, "noise_multiplier_planned": planned, "epsilon_planned": accounted, "claim": claim,
                "verdict": said})
    return out


def _planned(found: list[dict[str, Any]], plan: CanaryPlan, *, rounds: int) -> tuple[float, str, str]:
    """The noise multiplier (in clip units of the release the canaries read) the mechanism's setting gives, what it
    stands for, and the mechanism's name."""
    if plan.mechanism == "central":
        row = next(m for m in found if str(m.get("mechanism", "")).startswith("DifferentialPrivacy"))
        what = ("the wrapper's noise multiplier over the clients it sent to each round, no amplification by sampling "
                "(as its own accountant)")
        if plan.adaptive and math.isfinite(float(row.get("mu_mean_as_run", math.inf))) and row["mu_mean_as_run"] > 0:
            rounds_run = len(row.get("adaptive_clips") or {}) or rounds
            what = ("the noise multiplier of the wrapper's mean as it ran (z_Delta of its split, at the clip after "
                    "each round's update over the clip the round's updates were clipped to; the rounds' root mean "
                    "square): the canaries read the mean's release, not the clipped count's")
            return math.sqrt(rounds_run) / float(row["mu_mean_as_run"]), what, str(row["mechanism"])
        return float(row["noise_multiplier_measured"]), what, str(row["mechanism"])
    row = next(m for m in found if m.get("mechanism") == "LocalDpMod")
    eps, mod_delta = float(row[EPSILON_CLAIMED.key]), float(row["delta"])
    z = math.sqrt(2 * math.log(1.25 / mod_delta)) / eps if eps > 0 and 0 < mod_delta < 1 else 0.0
    return z, (f"LocalDpMod's own formula for epsilon {eps:g} at delta {mod_delta:g} with its sensitivity equal to "
               f"its clip, composed over the {rounds} rounds"), "LocalDpMod"
