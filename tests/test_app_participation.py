"""Participation inference on a Flower app's aggregates (``privbench/app_audit/participation.py``), on runs built by
hand: the next model is trained on the cohort's records by plain gradient descent, so members are known exactly."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from privbench.app_audit.participation import aggregates, cohorts, participation
from privbench.app_audit.recording import Sent
from privbench.app_audit.simulation import AppRun
from privbench.errors import AttackNotApplicableError

DIM, CLIENTS, RECORDS = 64, 6, 12


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(DIM, 2)


def _records(client: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + client)  # random labels: only training on them lowers their loss
    return torch.randn(RECORDS, DIM, generator=gen), torch.randint(0, 2, (RECORDS,), generator=gen)


def _trained(state: dict[str, torch.Tensor], members: list[int], steps: int = 30) -> dict[str, torch.Tensor]:
    """FedAvg's next model where each member takes ``steps`` gradient steps on its records (full batch, lr 0.5)."""
    updates = []
    for c in members:
        net = _model()
        net.load_state_dict(state)
        opt = torch.optim.SGD(net.parameters(), lr=0.5)
        x, y = _records(c)
        for _ in range(steps):
            opt.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
        updates.append({n: t.detach() - state[n] for n, t in net.state_dict().items()})
    return {n: state[n] + sum(u[n] for u in updates) / len(updates) for n in state}


def _run(cohort: list[list[int]], *, learn: bool = True) -> AppRun:
    """Rounds 1.. with the given cohorts: a train batch down (the model), replies up, then an evaluate batch down
    carrying the next model; node 10 + c is client c."""
    state = {n: t.detach().clone() for n, t in _model().state_dict().items()}
    messages: list[Sent] = []
    models = []
    for r, members in enumerate(cohort, start=1):
        models.append(("train", r, state))
        for c in members:
            messages.append(Sent("down", "train", r, 10 + c, 0, 0, arrays=state, message_id=f"{r}-{c}"))
            messages.append(Sent("up", "train", r, 10 + c, 0, 0, arrays=state, message_id=f"{r}-{c}"))
        state = _trained(state, members) if learn else state
        models.append(("evaluate", r, state))
    notes = []
    for c in range(CLIENTS):
        x, y = _records(c)
        notes.append({"node": 10 + c, "type": "train", "inputs": x, "labels": y})
        held = torch.Generator().manual_seed(200 + c)
        notes.append({"node": 10 + c, "type": "evaluate", "inputs": torch.randn(RECORDS, DIM, generator=held),
                      "labels": torch.randint(0, 2, (RECORDS,), generator=held)})
    return AppRun(messages, notes, partitions={10 + c: c for c in range(CLIENTS)}, models=models)


def test_each_round_pairs_the_model_sent_with_the_next_and_its_cohort():
    run = _run([[0, 1, 2], [3, 4, 5]])
    pairs = aggregates(run, {"weight", "bias"})
    assert [r for r, _, _ in pairs] == [1, 2]
    assert torch.equal(pairs[1][1]["weight"], run.models[2][2]["weight"])  # round 2 starts from round 1's result
    assert cohorts(run) == {1: {"client0", "client1", "client2"}, 2: {"client3", "client4", "client5"}}
    # the last round with no model after it is not observed
    run.models = run.models[:-1]
    assert [r for r, _, _ in aggregates(run, {"weight", "bias"})] == [1]


def test_members_are_told_apart_when_the_aggregate_learned_their_records():
    got = participation(_run([[0, 1, 2], [3, 4, 5], [0, 2, 4]]), _model, seed=0)
    assert (got["rounds"], got["pairs"], got["members"]) == (3, 18, 9)
    assert got["participation_auc"] >= 0.9
    low, high = got["participation_auc_interval"]
    assert low <= got["participation_auc"] <= high
    # records no client trained on (random labels) carry nothing: the informed chance stays near a coin
    assert abs(got["participation_auc_informed_chance"] - 0.5) < 0.35


def test_an_aggregate_that_learned_nothing_scores_chance():
    got = participation(_run([[0, 1, 2], [3, 4, 5]], learn=False), _model, seed=0)
    assert got["participation_auc"] == 0.5  # every score ties at zero


def test_a_run_where_every_client_joins_every_round_is_refused():
    with pytest.raises(AttackNotApplicableError, match="no non-member"):
        participation(_run([list(range(CLIENTS))] * 2), _model, seed=0)
