"""The source game: every client's upload of the victim round and records drawn evenly from their training; the
evaluator scores the share attributed to their own client against 1 / clients and a class-informed prior."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from privbench.attacks.base import Attack
from privbench.attacks.membership.findings import SourceGuesses
from privbench.attacks.membership.views import SourceView
from privbench.audit.games import Game, Play, messages, register_game, register_summary
from privbench.audit.plan import Plan
from privbench.audit.score import Scoring, Truth, register_scorer
from privbench.data import FederatedData
from privbench.errors import AttackNotApplicableError, ConfigError
from privbench.figures import SOURCE_ACCURACY, SOURCE_CHANCE, SOURCE_CHANCE_INFORMED
from privbench.payloads import Payload, PayloadStore
from privbench.pixels import normalise


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


@register_game("source")
class Source(Game):
    """Which client holds each record: every client's upload of the audited client's round."""

    def check(self, p: Plan, data: FederatedData, model: nn.Module, policy: Any) -> None:
        if policy.clients == "victim" or (policy.clients != "all" and len(policy.clients) < 2):
            raise ConfigError("attack=source compares every client's upload of the victim round: set "
                              "capture.clients=all (or a list of at least two clients)")

    def stage(self, p: Plan, store: PayloadStore, model: nn.Module, data: FederatedData, clients: list[int]
              ) -> list[Play]:
        plays = []
        for payload, _, records in messages(p, store, clients):
            view, answer = source_game(p, payload, model, data, store)
            plays.append(Play(payload, view, records, answer))
        return plays


@register_scorer(SourceGuesses)
def score_source(finding: SourceGuesses, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """Source inference: the share of records attributed to their own client, against 1 / clients and against a
    prior that knows each client's classes (uniform over the clients holding the record's class)."""
    if truth.owners is None or truth.holders is None:
        raise TypeError("source guesses need the records' owners (Truth.owners, Truth.holders)")
    right = finding.guesses.eq(truth.owners).double()
    return {SOURCE_ACCURACY.key: float(right.mean()), SOURCE_CHANCE.key: 1.0 / len(finding.clients),
            SOURCE_CHANCE_INFORMED.key: float((1.0 / truth.holders.double()).mean()),
            "source_records": len(right), "source_clients": len(finding.clients), **finding.info}


@register_summary(25)
def source_lines(privacy: dict[str, Any], threat: dict[str, Any]) -> list[tuple[str, str]]:
    """Source inference."""
    lines: list[tuple[str, str]] = []
    if SOURCE_ACCURACY.key in privacy:
        lines.append(("source", f"which client holds a record: {SOURCE_ACCURACY.shown(privacy)} "
                                f"right over {privacy.get('source_records')} records of "
                                f"{privacy.get('source_clients')} clients (chance {SOURCE_CHANCE.shown(privacy)}, "
                                f"knowing each client's classes {SOURCE_CHANCE_INFORMED.shown(privacy)})"))
    return lines
