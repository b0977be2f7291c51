"""Participation inference on the app's aggregates: did this client take part in the round a model came from?

What secure aggregation leaves the server (and anyone the next model is sent to): each round's model before and
after its uploads were aggregated. privbench's client-level test (``attacks/membership/participation.py``, the loss
change of a client's records from the round's model to the next, Watson et al. 2022 lifted to clients) scores every
(round, client) pair; members are the clients whose replies to the round's model came back without error,
non-members every other candidate. Candidates are the clients that trained in some round; the attacker holds
records of each: those the client trained on (as the evaluator noted them). The informed chance runs the same test
on each client's own evaluation records (never trained on by that client): what the clients' differing data alone
give.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.app_audit.attacks import each_once, held_out
from privbench.app_audit.recording import Broadcast
from privbench.app_audit.simulation import AppRun
from privbench.errors import AttackNotApplicableError

Records = tuple[torch.Tensor, torch.Tensor]
State = dict[str, torch.Tensor]
Game = tuple[int, State, State, list[str]]  # round, its model, the next model, the candidates


def _covers(b: Broadcast, names: set[str]) -> bool:
    return b.same and names <= b.arrays.keys()


def aggregates(run: AppRun, names: set[str]) -> tuple[list[tuple[int, State, State, Broadcast]], list[str]]:
    """``(round, model sent for it, next model sent, the batch that sent it)`` for every train round whose model
    every client received alike (all of ``names``) and a later batch shows the result of (the round's evaluate
    model, else the next round's train model); and why each other train round was left out."""
    out: list[tuple[int, State, State, Broadcast]] = []
    left: list[str] = []
    for i, b in enumerate(run.models):
        if b.message_type.split(".")[0] != "train" or any(r == b.round for r, *_ in out):
            continue
        if not _covers(b, names):
            left.append(f"round {b.round}: " + ("its clients received different models (per-client downloads)"
                                                if not b.same else "its model lacks some of the model's tensors"))
            continue
        later = next((x for x in run.models[i + 1:] if (x.message_type, x.round) != (b.message_type, b.round)
                      and _covers(x, names)), None)
        if later is None:
            left.append(f"round {b.round}: no model is sent after it")
        elif all(torch.equal(later.arrays[n], b.arrays[n]) for n in names):
            left.append(f"round {b.round}: the next model sent equals its model")
        else:
            out.append((b.round, {n: b.arrays[n] for n in names}, {n: later.arrays[n] for n in names}, b))
    return out, left


def cohort(run: AppRun, sent: Broadcast) -> set[str]:
    """The clients whose replies to the batch ``sent`` came back without error."""
    ids = set(sent.message_ids)
    return {f"client{run.partitions.get(m.node, m.node)}" for m in run.messages
            if m.direction == "up" and m.kind == "train" and not m.error and m.message_id in ids}


def trained_records(run: AppRun, count: int, seed: int) -> dict[str, Records]:
    """Up to ``count`` records each client trained on in any round (drawn by ``seed``)."""
    out = {}
    for node, partition in sorted(run.partitions.items(), key=lambda kv: kv[1]):
        rows = [(n["inputs"], n["labels"]) for n in run.notes
                if n["node"] == node and n["type"] == "train" and len(n["labels"])]
        if rows:
            x, y = each_once(torch.cat([x for x, _ in rows]), torch.cat([y for _, y in rows]))
            pick = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))[:count]
            out[f"client{partition}"] = (x[pick], y[pick])
    return out


def auc_interval(scores: np.ndarray, truth: np.ndarray, clients: list[str], seed: int,
                 resamples: int = 1000) -> list[float]:
    """95 % bootstrap interval of the AUC, whole clients (all their rounds) resampled: a client's pairs and a
    round's pairs are not independent."""
    from privbench.metrics.membership import auc

    rng = np.random.default_rng(seed)
    names = sorted(set(clients))
    rows = {c: np.flatnonzero(np.array(clients) == c) for c in names}
    boot = []
    for _ in range(resamples):
        pick = np.concatenate([rows[names[j]] for j in rng.integers(0, len(names), len(names))])
        if truth[pick].any() and not truth[pick].all():
            boot.append(auc(scores[pick], truth[pick]))
    return [float(v) for v in np.quantile(boot, [0.025, 0.975])] if boot else [0.0, 1.0]


def _scores(model: nn.Module, games: list[Game], records: dict[str, Records]) -> np.ndarray:
    from privbench.attacks.membership.participation import ParticipationInference
    from privbench.attacks.membership.views import ParticipationRound, ParticipationView

    rounds: list[ParticipationRound] = []
    candidates: list[tuple[int, int | None, str]] = []
    for round_, base, after, clients in games:
        slots = list(range(len(candidates), len(candidates) + len(clients)))
        candidates += [(round_, None, c) for c in clients]
        rounds.append(ParticipationRound(round_, None, base, after, clients, slots))
    view = ParticipationView(model, rounds, records, candidates)
    return ParticipationInference(records=max(len(y) for _, y in records.values())).attack(view, seed=0).scores.numpy()


def _by_number(clients: Any) -> list[str]:
    return sorted(clients, key=lambda c: int(c.removeprefix("client")))


def participation(run: AppRun, model: Callable[[], nn.Module], *, records: int = 256, seed: int = 0
                  ) -> dict[str, Any]:
    """The participation game over every observed aggregate: AUC (95 % interval resampling clients), TPR at 1 %
    FPR, chance 0.5 and the informed chance; refused, with why, where no round can be scored."""
    from privbench.metrics.membership import auc, clopper_pearson, tpr_at_fpr

    net = model()
    names = {n for n, t in net.state_dict().items() if t.is_floating_point()}
    observed, left = aggregates(run, names)
    if not observed:
        raise AttackNotApplicableError("no round's model (every floating tensor of the model, the same to every "
                                       f"client) is followed by another: {'; '.join(left) or 'no train round'}")
    held = trained_records(run, records, seed)
    if not held:
        raise AttackNotApplicableError("no client's loaders yielded training records: no candidate to score")
    games: list[Game] = [(r, base, after, _by_number(held)) for r, base, after, _ in observed]
    members = [cohort(run, sent) for *_, sent in observed]
    truth = np.array([c in m for (_, _, _, clients), m in zip(games, members) for c in clients], bool)
    if truth.all():
        raise AttackNotApplicableError(
            "every candidate took part in every observed round: no non-member to test; sample fewer clients a "
            "round (e.g. --run-config fraction-train=0.5) or more --supernodes")
    if not truth.any():
        raise AttackNotApplicableError("no candidate's reply to an observed round's model came back")
    pairs = [c for *_, clients in games for c in clients]
    scores = _scores(net, games, held)
    tpr, hits, positives = tpr_at_fpr(scores, truth, 0.01)
    out: dict[str, Any] = {
        "test": "loss change of the client's records, round's model to the next (participation)",
        "rounds": len(games), "pairs": len(truth), "members": int(truth.sum()), "clients": len(held),
        "rounds_left_out": left, "participation_auc": auc(scores, truth),
        "participation_auc_interval": auc_interval(scores, truth, pairs, seed), "participation_auc_chance": 0.5,
        "participation_tpr_at_1pct_fpr": tpr,
        "participation_tpr_at_1pct_fpr_interval": list(clopper_pearson(hits, positives)),
        "records_per_client": min(len(y) for _, y in held.values())}
    outside = {c: (h[0][:records], h[1][:records]) for c in held if (h := held_out(run, c)) is not None}
    kept = np.array([c in outside for c in pairs], bool)
    if outside and truth[kept].any() and not truth[kept].all():  # the informed chance, on clients with such records
        informed = _scores(net, [(r, b, a, [c for c in cl if c in outside]) for r, b, a, cl in games], outside)
        out["participation_auc_informed_chance"] = auc(informed, truth[kept])
        out["informed_chance_clients"] = len(outside)
    return out
