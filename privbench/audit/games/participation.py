"""The participation game (client-level membership): every recorded aggregate of ``payload``'s kind, the model its
round started from, and records of every known client; which (round, client) pairs took part is the evaluator's.

An aggregate of round ``r`` is FedAvg's global model of round ``r + 1``, a cluster's model of round ``r + 1``
(``cluster_model``) or a secure aggregate of round ``r`` (``aggregate``); its members are the clients whose
uploads (``update``, ``learngene``; ``masked_upload`` under secure aggregation) of round ``r`` went into it, its
start the model those members received. Every known client is a candidate for every aggregate. The evaluator's
informed chance: the same test on test-split records drawn in each client's class proportions.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from privbench.attacks.membership.findings import MembershipScores
from privbench.attacks.membership.views import ParticipationRound, ParticipationView
from privbench.audit.games import Game, Play, register_game
from privbench.audit.plan import Plan
from privbench.data import FederatedData
from privbench.errors import AttackNotApplicableError, ConfigError
from privbench.payloads import Payload, PayloadStore
from privbench.payloads.kinds import kinds_where
from privbench.pixels import normalise


def _aggregates(kind: str, store: PayloadStore) -> list[tuple[int, int | None, str, list[dict[str, Any]]]]:
    """Each stored aggregate of ``kind``: the round it aggregates, its cohort, its id and its members' upload
    records."""
    uploads = ("masked_upload",) if kind == "aggregate" else kinds_where(direction="up", carries="model",
                                                                         aggregate=False)
    later = 0 if kind == "aggregate" else 1
    seen: set[tuple[int, int | None]] = set()
    out = []
    for rec in store.records(kind=kind, phase="training"):
        r, cluster = int(rec["round"]) - later, rec["cluster"]
        if not rec["stored"] or r < 0 or (r, cluster) in seen:
            continue
        members = [m for k in uploads for m in store.records(kind=k, round=r, cluster=cluster, phase="training")]
        if members and all(m.get("base") for m in members):
            seen.add((r, cluster))
            out.append((r, cluster, str(rec["id"]), members))
    return sorted(out, key=lambda g: (g[0], -1 if g[1] is None else g[1]))


def participation_game(p: Plan, model: nn.Module, data: FederatedData, store: PayloadStore
                       ) -> tuple[ParticipationView, ParticipationView, torch.Tensor, Payload]:
    """The attacker's view (each client's own records), the evaluator's class-only view (test-split records in each
    client's class proportions, the informed chance), which candidates took part, and the first observed
    aggregate (the run's attacked payload, for its bytes)."""
    games_in = _observed(p.choice.kind, store)
    generator = torch.Generator().manual_seed(p.seed * 7919 + 67)
    per_client = int(getattr(p.attack, "records", 32))
    device = next(model.parameters()).device
    train_labels, test_labels = data.train.labels.cpu(), data.test.labels.cpu()
    by_class = {int(c): test_labels.eq(c).nonzero().flatten() for c in test_labels.unique()}
    own: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    proxy: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for c, indices in enumerate(data.clients):
        rows = torch.as_tensor(indices, dtype=torch.long)
        rows = rows[torch.randperm(len(rows), generator=generator)[:per_client]]
        labels = train_labels[rows]
        if any(int(y) not in by_class for y in labels.tolist()):
            raise AttackNotApplicableError(f"attack=participation: client{c} holds a class with no test record")
        twins = torch.stack([by_class[int(y)][torch.randint(len(by_class[int(y)]), (1,), generator=generator)][0]
                             for y in labels.tolist()])
        own[f"client{c}"] = (_inputs(data.train.images, rows, data).to(device), labels.to(device))
        proxy[f"client{c}"] = (_inputs(data.test.images, twins, data).to(device), test_labels[twins].to(device))
    clients = list(own)
    games: list[ParticipationRound] = []
    candidates: list[tuple[int, int | None, str]] = []
    member: list[bool] = []
    for r, cluster, aggregate_id, base_id, took_part in games_in:
        base = store.load(base_id).tensors
        aggregate = store.load(aggregate_id).tensors
        assert base is not None and aggregate is not None
        slots = list(range(len(candidates), len(candidates) + len(clients)))
        games.append(ParticipationRound(r, cluster, {n: t.to(device) for n, t in base.items()},
                                        {n: t.to(device) for n, t in aggregate.items() if t.is_floating_point()},
                                        clients, slots))
        candidates += [(r, cluster, c) for c in clients]
        member += [c in took_part for c in clients]
    is_member = torch.tensor(member, dtype=torch.bool)
    if is_member.all() or not is_member.any():
        raise AttackNotApplicableError("attack=participation: every client took part in every observed aggregate "
                                       "(or none did); sample fewer participants (fl.participants < data.num_clients)")
    knowledge = {"payload_kind": p.choice.kind, "level": "client (did this client take part in the round?)",
                 "observer": "sees the models the server sends: each aggregate and the model its round started from",
                 "aggregates": [{"round": r, "cluster": k, "payload": a} for r, k, a, _, _ in games_in],
                 "records": f"{per_client} training records of each of the {len(clients)} known clients, labels known",
                 "members": "not given"}
    view = ParticipationView(model, games, own, candidates, knowledge)
    informed = ParticipationView(model, games, proxy, candidates,
                                 {**knowledge, "records": "evaluator's class-only twin: a test-split record of each "
                                                          "record's class"})
    return view, informed, is_member, store.load(games_in[0][2])


def _observed(kind: str, store: PayloadStore) -> list[tuple[int, int | None, str, str, set[str]]]:
    """Each kept aggregate of ``kind`` whose round's download was kept too: its round, cohort, id, the download's id
    and who took part; refused in one line where there is none."""
    games_in = []
    for r, cluster, aggregate_id, members in _aggregates(kind, store):
        base_id = str(members[0]["base"])
        base_rec = next(store.records(id=base_id), None)
        if base_rec is None or not base_rec["stored"]:
            continue
        games_in.append((r, cluster, aggregate_id, base_id, {str(m["sender"]) for m in members}))
    if not games_in:
        raise AttackNotApplicableError(f"attack=participation: no {kind} was kept with the download its round "
                                       "started from (set capture.rounds=all capture.clients=all, fl.rounds >= 2)")
    return games_in


def _inputs(images: torch.Tensor, rows: torch.Tensor, data: FederatedData) -> torch.Tensor:
    return normalise(images[rows.to(images.device)].cpu().float() / 255.0, data.train.mean, data.train.std)


@register_game("participation")
class Participation(Game):
    """Did each client take part in each observed aggregate's round: one play over every aggregate, its first
    aggregate as the attacked message; the evaluator holds who took part and the same test's scores on records that
    carry only each client's classes (the informed chance)."""

    def check(self, p: Plan, data: FederatedData, model: nn.Module, policy: Any) -> None:
        if policy.rounds != "all" or policy.clients != "all":
            raise ConfigError("attack=participation reads every round's aggregate and the download it started from: "
                              "set capture.rounds=all capture.clients=all")
        if p.choice.kind != "aggregate" and p.protocol.rounds < 2:
            raise ConfigError(f"attack=participation with payload={p.choice.kind}: round r's aggregate is the model "
                              f"sent in round r + 1, so it needs fl.rounds >= 2 (fl.rounds={p.protocol.rounds})")

    def stage(self, p: Plan, store: PayloadStore, model: nn.Module, data: FederatedData, clients: list[int]
              ) -> list[Play]:
        view, twins, took_part, first = participation_game(p, model, data, store)
        informed = p.attack.attack(twins, seed=p.seed)
        if not isinstance(informed, MembershipScores):
            raise TypeError(f"attack={p.attack.name} answered the participation game with {type(informed).__name__}, "
                            "not membership scores")
        return [Play(first, view, [], {"membership": took_part, "informed_scores": informed.scores})]
