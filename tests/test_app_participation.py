"""Participation inference on a Flower app's aggregates (``privbench/app_audit/participation.py``), on runs built by
hand: the next model is trained on the cohort's records by plain gradient descent, so members are known exactly."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from privbench.app_audit.participation import aggregates, auc_interval, cohort, participation
from privbench.app_audit.recording import Broadcast, Sent
from privbench.app_audit.simulation import AppRun
from privbench.errors import AttackNotApplicableError

DIM, CLIENTS, RECORDS = 64, 6, 12
NAMES = {"weight", "bias"}


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(DIM, 2)


def _records(client: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + client)  # random labels: only training on them lowers their loss
    return torch.randn(RECORDS, DIM, generator=gen), torch.randint(0, 2, (RECORDS,), generator=gen)


def _trained(state: dict[str, torch.Tensor], members: list[int], steps: int = 10) -> dict[str, torch.Tensor]:
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


def _run(cohorts: list[list[int]], *, learn: bool = True, steps: int = 10) -> AppRun:
    """Rounds 1.. with the given cohorts: a train batch down (the model), replies up, then an evaluate batch down
    carrying the next model; node 10 + c is client c."""
    state = {n: t.detach().clone() for n, t in _model().state_dict().items()}
    messages: list[Sent] = []
    models = []
    for r, members in enumerate(cohorts, start=1):
        ids = [f"{r}-{c}" for c in members]
        models.append(Broadcast("train", r, state, ids, True))
        for c in members:
            messages.append(Sent("down", "train", r, 10 + c, 0, 0, arrays=state, message_id=f"{r}-{c}"))
            messages.append(Sent("up", "train", r, 10 + c, 0, 0, arrays=state, message_id=f"{r}-{c}"))
        state = _trained(state, members, steps) if learn else {n: t.clone() for n, t in state.items()}
        models.append(Broadcast("evaluate", r, state, [f"e{r}"], True))
    notes = []
    for c in range(CLIENTS):
        x, y = _records(c)
        notes.append({"node": 10 + c, "type": "train", "inputs": x, "labels": y})
        held = torch.Generator().manual_seed(200 + c)
        notes.append({"node": 10 + c, "type": "evaluate", "inputs": torch.randn(RECORDS, DIM, generator=held),
                      "labels": torch.randint(0, 2, (RECORDS,), generator=held)})
    return AppRun(messages, notes, partitions={10 + c: c for c in range(CLIENTS)}, models=models)


def test_each_round_pairs_the_model_sent_with_the_model_made_from_its_uploads():
    run = _run([[0, 1, 2], [3, 4, 5]], steps=1)
    pairs, left = aggregates(run, NAMES)
    assert [r for r, *_ in pairs] == [1, 2] and left == []
    for (_, base, after, sent), (train, evaluate) in zip(pairs, zip(run.models[0::2], run.models[1::2])):
        assert sent is train and torch.equal(base["weight"], train.arrays["weight"])
        assert torch.equal(after["weight"], evaluate.arrays["weight"])  # the round's own result, not a later one
    assert [cohort(run, sent) for *_, sent in pairs] == [{"client0", "client1", "client2"},
                                                         {"client3", "client4", "client5"}]
    # without the evaluate batches, a round's result is the next round's train model; the last round has none
    run.models = run.models[0::2]
    pairs, left = aggregates(run, NAMES)
    assert [r for r, *_ in pairs] == [1] and left == ["round 2: no model is sent after it"]
    assert torch.equal(pairs[0][2]["weight"], run.models[1].arrays["weight"])


def test_rounds_without_one_whole_model_for_every_client_are_left_out_saying_why():
    run = _run([[0, 1, 2], [3, 4, 5], [0, 1, 2]], steps=1)
    run.models[0].same = False
    run.models[2].arrays = {"weight": run.models[2].arrays["weight"]}
    run.models[5].arrays = dict(run.models[4].arrays)  # round 3's result equals its model
    pairs, left = aggregates(run, NAMES)
    assert pairs == [] and left == ["round 1: its clients received different models (per-client downloads)",
                                    "round 2: its model lacks some of the model's tensors",
                                    "round 3: the next model sent equals its model"]
    with pytest.raises(AttackNotApplicableError, match="per-client downloads"):
        participation(run, _model, seed=0)


def test_members_are_told_apart_when_the_aggregate_learned_their_records():
    got = participation(_run([[0, 1, 2], [3, 4, 5], [0, 2, 4]]), _model, seed=0)
    assert (got["rounds"], got["pairs"], got["members"], got["clients"]) == (3, 18, 9, 6)
    assert got["participation_auc"] >= 0.9
    low, high = got["participation_auc_interval"]
    assert low <= got["participation_auc"] <= high
    assert got["informed_chance_clients"] == 6 and 0 <= got["participation_auc_informed_chance"] <= 1


def test_an_aggregate_that_learned_nothing_is_refused():
    with pytest.raises(AttackNotApplicableError, match="equals its model"):
        participation(_run([[0, 1, 2], [3, 4, 5]], learn=False), _model, seed=0)


def test_the_interval_resamples_whole_clients():
    """Two clients, one always a member scoring high, one never: resampling clients draws one-class samples half
    the time (skipped) and otherwise the full separation, so the interval is the point [1, 1]; over pairs treated
    as independent it would be too; with a third client scoring against the grain the interval widens."""
    scores, truth = np.array([1.0, 1.0, 0.0, 0.0]), np.array([True, True, False, False])
    assert auc_interval(scores, truth, ["a", "a", "b", "b"], seed=0) == [1.0, 1.0]
    scores, truth = np.r_[scores, 0.0, 1.0], np.r_[truth, True, False]
    low, high = auc_interval(scores, truth, ["a", "a", "b", "b", "c", "c"], seed=0)
    assert low < 0.5 < high == 1.0


def test_a_run_where_every_client_joins_every_round_is_refused():
    with pytest.raises(AttackNotApplicableError, match="no non-member"):
        participation(_run([list(range(CLIENTS))] * 2, steps=1), _model, seed=0)
