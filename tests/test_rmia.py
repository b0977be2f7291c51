"""RMIA (Zarifzadeh et al., ICML 2024): the pairwise score by hand, the offline prior, planted members found, and an
overfit client's members found where the loss change sees less."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import privbench
from privbench.attacks.membership.rmia import RMIA, rmia_scores
from privbench.errors import AttackNotApplicableError
from privbench.metrics.membership import auc

#: An overfit client (tests/test_lira.py's setting): 30 local epochs of batch 8 on all its images.
OVERFIT = ["fl=fedavg", "payload=update", "victim.update_data=all", "fl.local_epochs=30", "data.num_clients=60",
           "data.partition=iid", "fl.participants=5", "fl.rounds=2", "victim.round=1", "fl.batch_size=8",
           "metrics.lpips=false"]


def test_the_pairwise_score_by_hand() -> None:
    """Two candidates, three population records, two references. Ratios p(.|theta) / mean_ref p(.): candidates 0.8 /
    0.4 = 2 and 0.3 / 0.5 = 0.6; population 0.5 / 0.5 = 1, 0.2 / 0.4 = 0.5 and 0.6 / 0.4 = 1.5. Candidate 0 beats
    every z at gamma 1 and two of three at gamma 1.5 (2 / 1.5 < 1.5); candidate 1 beats only 0.5."""
    target = torch.tensor([0.8, 0.3, 0.5, 0.2, 0.6], dtype=torch.float64)
    refs = torch.tensor([[0.3, 0.4, 0.4, 0.3, 0.5], [0.5, 0.6, 0.6, 0.5, 0.3]], dtype=torch.float64)
    inside = torch.tensor([[True, False], [False, True]])
    assert rmia_scores(target, refs, inside, candidates=2).tolist() == pytest.approx([1.0, 1 / 3])
    assert rmia_scores(target, refs, inside, candidates=2, gamma=1.5).tolist() == pytest.approx([2 / 3, 0.0])
    # offline: p(x) = ((1 + a) mean_out + (1 - a)) / 2; a = 1 keeps the references' mean, a = 0 averages it with 1
    assert rmia_scores(target, refs, None, candidates=2, offline_a=1.0).tolist() == pytest.approx([1.0, 1 / 3])
    prior0 = (refs.mean(0) + 1) / 2
    ratio = target / prior0
    want = [(ratio[i] / ratio[2:] >= 1).double().mean().item() for i in range(2)]
    assert rmia_scores(target, refs, None, candidates=2, offline_a=0.0).tolist() == pytest.approx(want)


def test_planted_members_are_found_and_a_coin_is_not() -> None:
    """References agree on every record; the target gives members 1.3 times their probability: RMIA ranks them
    first (AUC above 0.95); where the target is one more reference, AUC sits near 0.5."""
    rng = np.random.default_rng(0)
    m, z, k = 200, 400, 16
    base = torch.from_numpy(rng.uniform(0.2, 0.7, size=m + z))
    refs = (base * torch.from_numpy(rng.lognormal(0, 0.05, size=(k, m + z)))).clamp(max=1)
    members = torch.from_numpy(rng.random(m) < 0.5)
    target = base.clone()
    target[:m][members] *= 1.3
    halves = (torch.arange(k).unsqueeze(1) + torch.arange(m).unsqueeze(0)) % 2 == 0  # each candidate in half
    scores = rmia_scores(target.clamp(max=1), refs, halves, candidates=m)
    assert auc(scores.numpy(), members.numpy()) > 0.95
    coin = rmia_scores(refs[0], refs[1:], halves[1:], candidates=m)
    assert abs(auc(coin.numpy(), members.numpy()) - 0.5) < 0.1


def test_online_prior_weighs_in_and_out_alike_and_needs_both() -> None:
    """One candidate in 1 of 3 references (probabilities 0.9 in, 0.3 and 0.5 out): p(x) = (0.9 + 0.4) / 2 = 0.65,
    not the plain mean 0.567; its ratio 0.65 / 0.65 = 1 ties the population record's (0.5 / 0.5), so at gamma 1 it
    beats it. A candidate no reference holds is refused."""
    refs = torch.tensor([[0.9, 0.5], [0.3, 0.5], [0.5, 0.5]], dtype=torch.float64)
    target = torch.tensor([0.65, 0.5], dtype=torch.float64)
    inside = torch.tensor([[True], [False], [False]])
    assert rmia_scores(target, refs, inside, candidates=1).tolist() == [1.0]
    assert rmia_scores(target * torch.tensor([0.99, 1.0], dtype=torch.float64), refs, inside,
                       candidates=1).tolist() == [0.0]
    with pytest.raises(AttackNotApplicableError, match="3 references cover 0 of 1"):
        rmia_scores(target, refs, torch.zeros(3, 1, dtype=torch.bool), candidates=1)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="attack.population"):
        RMIA(population=0)
    with pytest.raises(ValueError, match="attack.variant"):
        RMIA(variant="both")  # type: ignore[arg-type]


@pytest.mark.slow  # about 40 s: 16 references trained at once
def test_rmia_finds_the_members_of_an_overfit_update(tmp_path) -> None:
    got = privbench.run([*OVERFIT, "attack=rmia", "attack.shadows=16"], results_dir=tmp_path)
    change = privbench.run([*OVERFIT, "attack=membership"], results_dir=tmp_path)
    rmia, base = got.metrics["privacy"], change.metrics["privacy"]
    assert rmia["mia_test"] == "rmia_online" and rmia["mia_members"] == 80
    assert rmia["mia_auc"] > 0.8 and rmia["mia_auc"] > base["mia_auc"] + 0.05
    threat = json.loads((got.run_dir / "threat_model.json").read_text())
    assert threat["attack_budget"]["population_z"] == 1000 and threat["attack_budget"]["shadows"] == 16
