"""Participation inference on the app's aggregates: did this client take part in the round a model came from?

What secure aggregation leaves the server (and anyone the next model is sent to): each round's model before and
after its uploads were aggregated. privbench's client-level test (``attacks/membership/participation.py``, the loss
change of a client's records from the round's model to the next, Watson et al. 2022 lifted to clients) scores every
(round, client) pair; members are the clients whose replies to the round's model were aggregated, non-members the
clients it was not sent to. The attacker holds records of every candidate: the records the client trained on in any
round (as the evaluator noted them). The informed chance runs the same test on each client's own evaluation records
(never trained on): what the clients' differing data alone give.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.app_audit.attacks import _unique, held_out
from privbench.app_audit.simulation import AppRun
from privbench.errors import AttackNotApplicableError

Records = tuple[torch.Tensor, torch.Tensor]


State = dict[str, torch.Tensor]


def aggregates(run: AppRun, names: set[str]) -> list[tuple[int, State, State]]:
    """``(round, model sent for it, next model sent)`` for every train round some later batch shows the result of
    (the next round's train model, or the round's evaluate model); tensors restricted to ``names``."""
    out: list[tuple[int, State, State]] = []
    for i, (kind, round_, arrays) in enumerate(run.models):
        if kind.split(".")[0] != "train":
            continue
        later = next((a for k, r, a in run.models[i + 1:] if (k, r) != (kind, round_)), None)
        if later is None or any(r == round_ for r, _, _ in out):
            continue
        base = {n: t for n, t in arrays.items() if n in names}
        after = {n: t for n, t in later.items() if n in names}
        if base and base.keys() == after.keys():
            out.append((round_, base, after))
    return out


def cohorts(run: AppRun) -> dict[int, set[str]]:
    """Each round's clients whose replies to a train message that carried the model came back without error."""
    carried = {m.message_id: m.round for m in run.messages if m.direction == "down" and m.kind == "train" and m.arrays}
    out: dict[int, set[str]] = {}
    for m in run.messages:
        if m.direction == "up" and m.kind == "train" and not m.error and m.message_id in carried:
            out.setdefault(carried[m.message_id], set()).add(f"client{run.partitions.get(m.node, m.node)}")
    return out


def trained_records(run: AppRun, count: int, seed: int) -> dict[str, Records]:
    """Up to ``count`` records each client trained on in any round (drawn by ``seed``)."""
    out = {}
    for node, partition in sorted(run.partitions.items(), key=lambda kv: kv[1]):
        rows = [(n["inputs"], n["labels"]) for n in run.notes
                if n["node"] == node and n["type"] == "train" and len(n["labels"])]
        if rows:
            x, y = _unique(torch.cat([x for x, _ in rows]), torch.cat([y for _, y in rows]))
            pick = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))[:count]
            out[f"client{partition}"] = (x[pick], y[pick])
    return out


def _interval(scores: np.ndarray, truth: np.ndarray, seed: int, resamples: int = 1000) -> list[float]:
    """95 % bootstrap interval of the AUC, members and non-members resampled apart."""
    from privbench.metrics.membership import auc

    rng = np.random.default_rng(seed)
    ins, outs = scores[truth], scores[~truth]
    boot = [auc(np.r_[rng.choice(ins, len(ins)), rng.choice(outs, len(outs))],
                np.r_[np.ones(len(ins), bool), np.zeros(len(outs), bool)]) for _ in range(resamples)]
    return [float(v) for v in np.quantile(boot, [0.025, 0.975])]


Game = tuple[int, State, State, list[str]]  # round, model, next model, clients


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


def participation(run: AppRun, model: Callable[[], nn.Module], *, records: int = 256, seed: int = 0
                  ) -> dict[str, Any]:
    """The participation game over every observed aggregate: AUC (95 % bootstrap interval over pairs), TPR at 1 %
    FPR, chance 0.5 and the informed chance; refused where no round leaves a client out."""
    from privbench.metrics.membership import auc, clopper_pearson, tpr_at_fpr

    net = model()
    state = net.state_dict()
    names = {n for n, t in state.items() if t.is_floating_point()}
    observed = aggregates(run, names)
    if not observed:
        raise AttackNotApplicableError("no round's model is followed by the model made from its uploads")
    held = trained_records(run, records, seed)
    cohort = cohorts(run)
    games: list[Game] = [(r, base, after, sorted(held, key=lambda c: int(c.removeprefix("client"))))
             for r, base, after in observed if r in cohort]
    truth = np.array([c in cohort[r] for r, _, _, clients in games for c in clients], bool)
    if truth.all() or not truth.any():
        raise AttackNotApplicableError(
            "every client took part in every observed round (or none did): no non-member to test; sample fewer "
            "clients a round (e.g. --run-config fraction-train=0.5) or more --supernodes")
    scores = _scores(net, games, held)
    tpr, hits, positives = tpr_at_fpr(scores, truth, 0.01)
    out: dict[str, Any] = {
        "test": "loss change of the client's records, round's model to the next (participation)",
        "rounds": len(games), "pairs": len(truth), "members": int(truth.sum()),
        "participation_auc": auc(scores, truth), "participation_auc_interval": _interval(scores, truth, seed),
        "participation_auc_chance": 0.5, "participation_tpr_at_1pct_fpr": tpr,
        "participation_tpr_at_1pct_fpr_interval": list(clopper_pearson(hits, positives)),
        "records_per_client": min(len(y) for _, y in held.values())}
    outside = {c: h for c in held if (h := held_out(run, c)) is not None}
    if outside.keys() == held.keys():  # the same test on records no client trained on: the informed chance
        informed = _scores(net, games, {c: (x[:records], y[:records]) for c, (x, y) in outside.items()})
        out["participation_auc_informed_chance"] = auc(informed, truth)
    return out
