"""One audit of a Flower app: run it with the recording in place, write its traffic, measure its privacy
mechanisms, attack each upload, and read the gate; the folder appears whole or not at all."""
from __future__ import annotations

import json
import math
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privbench.app_audit import attacks, canaries, inversion, privacy, record_canaries
from privbench.app_audit.app import FlowerApp
from privbench.app_audit.gate import Rule
from privbench.app_audit.model import find_model, legacy
from privbench.app_audit.participation import participation
from privbench.app_audit.record_canary_client import RecordPlan
from privbench.app_audit.reported import gain as reported_gain
from privbench.app_audit.reported import reported_metrics
from privbench.app_audit.simulation import AppRun, run_app
from privbench.app_audit.training import Declared
from privbench.app_audit.wire import write_wire
from privbench.errors import AttackNotApplicableError
from privbench.figures.labels import LABEL_COUNT_ERROR, LABEL_COUNT_ERROR_CHANCE, LABEL_SET_EXACT
from privbench.figures.reconstruction import PSNR_GAIN
from privbench.io import atomic_write_text

Records = tuple[torch.Tensor, torch.Tensor]


@dataclass
class Options:
    """What the command line asked of the audit (already checked)."""

    seed: int = 0
    model: str | None = None
    declared: Declared = field(default_factory=Declared)
    delta: float = 1e-5
    rules: list[Rule] = field(default_factory=list)
    command: str = ""
    reply_timeout: float = 300.0
    max_images: int = 8
    inversion_steps: int = 1600
    canaries: int = 0
    record_canaries: int = 0

    def record_plan(self) -> RecordPlan | None:
        """The canary records planted in the first SuperNode's DP-SGD (``--record-canaries``), or None."""
        if not self.record_canaries:
            return None
        seed = int(np.random.SeedSequence([self.seed, 2]).generate_state(1)[0])  # not the canary clients' directions
        return RecordPlan(self.record_canaries, host=0, seed=seed)


def mechanisms(app: FlowerApp, run: AppRun, o: Options) -> list[dict[str, Any]]:
    """Every privacy mechanism found, measured."""
    rounds = Counter(m.node for m in run.messages if m.direction == "up" and m.kind == "train" and m.arrays)
    found = []
    for mod in privacy.client_mods(run.client_app):
        if type(mod).__name__ == "LocalDpMod":
            found.append(privacy.local_dp(run, mod, rounds=max(rounds.values(), default=1), seed=o.seed))
        elif callable(mod) and getattr(mod, "__name__", "") in ("fixedclipping_mod", "adaptiveclipping_mod"):
            found.append({"mechanism": mod.__name__, "problems": [], "covers": "clips on the client for the "
                          "server's central DP wrapper (its noise is the wrapper's)"})
        elif callable(mod) and getattr(mod, "__name__", "") in ("secaggplus_mod", "secagg_mod"):
            found.append({"mechanism": f"secure aggregation ({mod.__name__})", "problems": [],
                          "covers": "each client's update: the server receives masked vectors and unmasks only "
                                    "their sum (the next round's model is its view of the round)"})
    clients: dict[int, set[int]] = {}  # the clients each round's train messages went to (SecAgg+ sends several)
    for m in run.messages:
        if m.direction == "down" and m.kind == "train":
            clients.setdefault(m.round, set()).add(m.node)
    secure = any(f["mechanism"].startswith("secure aggregation") for f in found)
    for strategy in run.strategies:
        dp = privacy.strategy_dp(strategy, sent=[len(clients[r]) for r in sorted(clients)], delta=o.delta,
                                 secure=secure, clips=run.clips, rounds_sent=sorted(clients))
        if dp is not None:
            found.append(dp)
    for node, partition in sorted(run.partitions.items(), key=lambda kv: kv[1]):
        dp = privacy.dp_sgd(run, f"client{partition}", node, delta=o.delta)
        if dp is not None:
            found.append(dp)
    return found


def evaluation_records(run: AppRun) -> tuple[dict[str, Records | None], dict[str, Records | None]]:
    """Each client's evaluated records once (its non-members), and the other clients' (its public data)."""
    held = {f"client{p}": attacks.held_out(run, f"client{p}") for p in sorted(set(run.partitions.values()))}
    publics: dict[str, Records | None] = {}
    for client in held:
        pool = [h for c, h in held.items() if c != client and h is not None]
        publics[client] = (torch.cat([x for x, _ in pool]), torch.cat([y for _, y in pool])) if pool else None
    return held, publics


def attack_uploads(run: AppRun, app: FlowerApp, model: Any, o: Options, folder: Path,
                   records: tuple[dict[str, Records | None], dict[str, Records | None]]) -> list[dict[str, Any]]:
    """Membership, label counts and reconstruction on each client's upload, each scored against its truth and
    chance."""
    out = []
    try:
        scale = inversion.input_scale(run)
    except AttackNotApplicableError as exc:
        scale, no_scale = None, str(exc)
    held, publics = records
    for cr in attacks.client_rounds(run, o.declared.reply_kind):
        row: dict[str, Any] = {"client": cr.client, "round": cr.round, "records": len(cr.members[1]), "skipped": []}
        if cr.not_a_model is not None:  # no attack reads a reply it cannot take for a model
            row["skipped"] = [f"{what}: {cr.not_a_model}" for what in ("membership", "labels", "reconstruction")]
            out.append(row)
            continue
        outside, public = held.get(cr.client), publics.get(cr.client)
        torch.manual_seed(o.seed)
        try:
            if outside is None:
                raise AttackNotApplicableError("the client evaluated on no records of its own (no non-members)")
            row["membership"] = attacks.membership(model, cr, outside, seed=o.seed)
        except AttackNotApplicableError as exc:
            row["skipped"].append(f"membership: {exc}")
        try:
            if public is None:
                raise AttackNotApplicableError("no other client's evaluation records to serve as public data")
            row["labels"] = attacks.label_counts(model, cr, public, o.declared, app.run_config, seed=o.seed)
        except AttackNotApplicableError as exc:
            row["skipped"].append(f"labels: {exc}")
        try:
            if scale is None or outside is None or public is None:
                raise AttackNotApplicableError(no_scale if scale is None else "no non-member or public records")
            row["reconstruction"] = inversion.reconstruct(
                model, cr, public, outside, scale,
                o.declared, app.run_config, max_images=o.max_images, iterations=o.inversion_steps, seed=o.seed,
                out=folder / "reconstructions" / f"r{cr.round:04d}-{cr.client}")
        except AttackNotApplicableError as exc:
            row["skipped"].append(f"reconstruction: {exc}")
        out.append(row)
    return out


def name_legacy_arrays(run: AppRun, model: Any) -> None:
    """Name each legacy list of arrays by the model's state dict, in order, where its count and every shape match;
    a list that does not match is dropped from the attacks (its bytes stay recorded)."""
    state = model().state_dict()
    names, shapes = list(state), [tuple(t.shape) for t in state.values()]

    def named(arrays: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        listed = [arrays[str(i)] for i in range(len(arrays))]
        matches = len(listed) == len(names) and all(tuple(t.shape) == s for t, s in zip(listed, shapes))
        return dict(zip(names, listed)) if matches else {}

    for m in run.messages:
        if m.arrays and legacy(m.arrays):
            m.arrays = named(m.arrays)
    for b in run.models:
        b.arrays = named(b.arrays) if legacy(b.arrays) else b.arrays


def _mean(values: list[float], *, bounds: tuple[float, float] = (-math.inf, math.inf)
          ) -> tuple[float | None, list[float] | None]:
    """The mean of per-upload figures and its 95 % t-interval within ``bounds`` (None with fewer than two)."""
    from scipy import stats

    if not values:
        return None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    half = float(stats.t.ppf(0.975, len(values) - 1) * stats.tstd(values) / len(values) ** 0.5)
    return mean, [max(bounds[0], mean - half), min(bounds[1], mean + half)]


def aggregate_attacks(run: AppRun, model: Any, o: Options) -> dict[str, Any]:
    """Participation inference on each round's aggregate (what secure aggregation leaves), or why not."""
    torch.manual_seed(o.seed)
    try:
        return participation(run, model, seed=o.seed)
    except AttackNotApplicableError as exc:
        return {"skipped": f"participation: {exc}"}


def gate_figures(uploads: list[dict[str, Any]], found: list[dict[str, Any]], aggregate: dict[str, Any],
                 reported: list[dict[str, Any]] | None = None, canary: dict[str, Any] | None = None,
                 record: dict[str, Any] | None = None) -> dict[str, Any]:
    """The gated figures: membership and label figures as means over the uploads (one test per upload; the worst
    of many noisy tests would fail a gate by chance), the largest measured epsilon, the canaries' epsilons."""
    auc, auc_ci = _mean([u["membership"]["membership_auc"] for u in uploads if "membership" in u], bounds=(0, 1))
    tpr, tpr_ci = _mean([u["membership"]["membership_tpr_at_1pct_fpr"] for u in uploads if "membership" in u],
                        bounds=(0, 1))
    sets, _ = _mean([u["labels"][LABEL_SET_EXACT.key] for u in uploads if "labels" in u])
    gain, gain_ci = _mean([u["labels"][LABEL_COUNT_ERROR_CHANCE.key] - u["labels"][LABEL_COUNT_ERROR.key]
                           for u in uploads if "labels" in u])
    psnr, psnr_ci = _mean([u["reconstruction"][PSNR_GAIN.key] for u in uploads if "reconstruction" in u])
    gains = reported_gain(reported or [])
    shares, shares_ci = _mean(gains) if gains is not None else (None, None)
    return {"participation_auc": aggregate.get("participation_auc"),
            "participation_auc_interval": aggregate.get("participation_auc_interval"),
            "membership_auc": auc, "membership_auc_interval": auc_ci, "membership_tpr_at_1pct_fpr": tpr,
            "membership_tpr_at_1pct_fpr_interval": tpr_ci, LABEL_SET_EXACT.key: sets, "label_count_error_gain": gain,
            "label_count_error_gain_interval": gain_ci, PSNR_GAIN.key: psnr, f"{PSNR_GAIN.key}_interval": psnr_ci,
            "class_proportion_gain": shares, "class_proportion_gain_interval": shares_ci,
            "epsilon_measured": max((m["epsilon_measured"] for m in found if m.get("epsilon_measured") is not None),
                                    default=None),
            "epsilon_empirical_lower": (canary or {}).get("epsilon_alarm"),
            "record_epsilon_empirical_lower": (record or {}).get("epsilon_alarm"),
            "problems": [*(p for m in found for p in m.get("problems", [])),
                         *([f"canary clients: {canary['verdict']}"] if canary and
                           str(canary.get("verdict", "")).startswith("BROKEN") else []),
                         *([f"canary records: {record['verdict']}"] if record and
                           str(record.get("verdict", "")).startswith("BROKEN") else [])],
            "mechanisms": found}


def run_audited(app: FlowerApp, o: Options) -> AppRun:
    """The app run with the audit's wrappers: in a loopback deployment where it asks for one, else simulated."""
    if app.deployment:
        from privbench.app_audit.deployment import deploy_app

        return deploy_app(app, seed=o.seed, reply_timeout=o.reply_timeout, canaries=o.canaries,
                          records=o.record_plan())
    planned = canaries.planner(o.canaries, app.supernodes, seed=o.seed) if o.canaries else None
    return run_app(app, seed=o.seed, reply_timeout=o.reply_timeout, canaries=planned, records=o.record_plan())


def audit(app: FlowerApp, out: Path, o: Options) -> tuple[dict[str, Any], bool]:
    """Audit ``app`` into the new folder ``out``; the summary and whether the gate failed."""
    start = time.perf_counter()
    full = run_audited(app, o)
    partial = out.parent / f".{out.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        carried = next((m.arrays for m in full.messages if m.direction == "down" and m.arrays), None)
        if carried is None:
            raise AttackNotApplicableError(f"{app.name}: the ServerApp sent no arrays; nothing to attack")
        model = find_model(app, carried, o.model)
        if legacy(carried):
            name_legacy_arrays(full, model)
        host = record_canaries.host_node(full, full.record_plan.host) if full.record_plan is not None else None
        # the canary clients' uploads are the audit's own, the host's carry the canary records: no attack reads them
        run = full.without(set(full.canaries) | ({host} if host is not None else set()))
        traffic = write_wire(full, partial, o.declared.reply_kind)
        found = mechanisms(app, full, o)
        canary = canaries.measure(full, found, delta=o.delta)
        record = record_canaries.measure(full, found, delta=o.delta)
        records = evaluation_records(run)
        uploads = attack_uploads(run, app, model, o, partial, records)
        aggregate = aggregate_attacks(run, model, o)
        reported = reported_metrics(run, model, records[1])
        figures = gate_figures(uploads, found, aggregate, reported, canary, record)
        results = [rule.check(figures) for rule in o.rules]
        summary = {"app": {"name": app.name, "root": str(app.root), "supernodes": app.supernodes, "seed": o.seed,
                           "engine": "loopback deployment" if app.deployment else "simulation",
                           "canary_clients": sorted(full.canaries), "record_canary_host": host,
                           "rounds": max((m.round for m in run.messages), default=0), "run_config": app.run_config,
                           "strategy": " around ".join(type(s).__name__ for s in run.strategies) or "none started",
                           "mods": [getattr(m, "__name__", type(m).__name__) for m in privacy.client_mods(run.client_app)],
                           "model": f"{model.__module__}:{model.__qualname__}"},
                   "bytes": traffic, "mechanisms": found, "problems": figures["problems"], "uploads": uploads,
                   "aggregates": aggregate, "reported_metrics": reported, "canaries": canary,
                   "record_canaries": record,
                   "notes": [*app.notes, *([] if uploads else [
                       "no client's train reply carries arrays (under secure aggregation they are masked vectors): "
                       "no upload is attacked; each round's aggregate is (participation inference, below)"])],
                   "figures": {k: v for k, v in figures.items() if k not in ("problems", "mechanisms")},
                   "gate": [{"rule": r.text, "failed": f, "why": w} for r, (f, w) in zip(o.rules, results)],
                   "command": o.command, "seconds": time.perf_counter() - start}
        from privbench.app_audit.gate import junit
        from privbench.app_audit.report import markdown, page
        from privbench.app_audit.threat import threat_model

        atomic_write_text(partial / "metrics.json", json.dumps(summary, indent=1, default=str) + "\n")
        atomic_write_text(partial / "threat_model.json", json.dumps(threat_model(summary, o), indent=1) + "\n")
        atomic_write_text(partial / "report.md", markdown(summary))
        atomic_write_text(partial / "report.html", page(summary))
        atomic_write_text(partial / "junit.xml", junit(o.rules, results, suite=f"privbench audit-app {app.name}",
                                                       seconds=summary["seconds"]))
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return summary, any(f for f, _ in results)
