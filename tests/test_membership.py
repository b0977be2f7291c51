"""Membership inference: the game (class-matched, shuffled, the answer kept from the attacker), the figures by hand,
and the attack end to end on a client that overfits its data."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

import privbench
from privbench.api import preflight
from privbench.errors import AttackNotApplicableError
from privbench.metrics.membership import auc, clopper_pearson, roc, tpr_at_fpr

#: A client that overfits: 100 images, 30 local epochs of batch 8, a ReLU ConvNet; its round-1 update is attacked.
OVERFIT = ["attack=membership", "fl=fedavg", "payload=update", "victim.update_data=all", "fl.local_epochs=30",
           "model=convnet", "data.num_clients=60", "data.partition=iid", "fl.participants=5", "fl.rounds=2",
           "victim.round=1", "fl.batch_size=8", "metrics.lpips=false"]

#: The same game, cheap: one round of one epoch, LeNet.
GAME = ["attack=membership", "fl=fedavg", "payload=update", "victim.update_data=all", "data.num_clients=60",
        "data.partition=iid", "fl.participants=2", "fl.rounds=1", "fl.local_epochs=1", "metrics.lpips=false"]


def test_auc_and_low_fpr_tpr_by_hand():
    rng = np.random.default_rng(0)
    scores = np.r_[rng.normal(1.0, 1.0, 300), rng.normal(0.0, 1.0, 300)]
    members = np.r_[np.ones(300, bool), np.zeros(300, bool)]
    # AUC is the Mann-Whitney U over n1 n0: count pairs by brute force
    pairs = (scores[members][:, None] > scores[~members][None, :]).mean()
    assert auc(scores, members) == pytest.approx(pairs)
    fpr, tpr = roc(scores, members)
    assert fpr[0] == tpr[0] == 0 and fpr[-1] == tpr[-1] == 1 and (np.diff(fpr) >= 0).all()
    # TPR at FPR 1 %: 3 of 300 false positives allowed, so accept every score above the 4th-highest non-member's
    threshold = np.sort(scores[~members])[-4]
    expected = (scores[members] > threshold).mean()
    got, hits, n = tpr_at_fpr(scores, members, 0.01)
    assert got == pytest.approx(expected) and n == 300 and hits == round(expected * 300)
    lo, hi = clopper_pearson(hits, n)
    assert lo == pytest.approx(stats.beta.ppf(0.025, hits, n - hits + 1))
    assert hi == pytest.approx(stats.beta.ppf(0.975, hits + 1, n - hits))
    assert auc(np.ones(4), np.array([True, False, True, False])) == 0.5  # ties: chance


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_the_game_is_class_matched_shuffled_and_keeps_its_answer(tmp_path):
    from privbench.attacks.membership.views import MembershipView

    result = privbench.run(GAME, results_dir=tmp_path)
    game = np.load(result.run_dir / "membership.npz")
    members = game["members"]
    assert members.sum() == (~members).sum() == result.metrics["privacy"]["mia_members"] > 20
    assert not members[:members.sum()].all()  # shuffled: the members do not come first
    threat = json.loads((result.run_dir / "threat_model.json").read_text())
    assert threat["members"].startswith("not given") and threat["candidate_labels"] == "given"
    assert "same classes" in threat["candidate_pool"]
    assert "membership" not in MembershipView.__dataclass_fields__  # the view has no field for the answer


def test_class_matching_pairs_each_member_with_a_test_record_of_its_class():
    from privbench.audit.games.membership import membership_game
    from privbench.audit.plan import plan, prepare
    from privbench.payloads import Payload

    p = plan(privbench.compose(GAME))
    data, model, _ = prepare(p)
    tensors = {n: t.detach().clone() for n, t in model.state_dict().items()}
    payload = Payload.from_tensors(kind="update", round=0, sender="client0", receiver="server", tensors=tensors)
    members = data.clients[0].tolist()
    view, answer = membership_game(p, members, payload, payload, model, data)
    labels = view.labels.cpu()
    assert sorted(labels[answer].tolist()) == sorted(labels[~answer].tolist())  # the same classes, as often
    assert answer.sum() == (~answer).sum() == len(view.candidates) // 2
    train = data.train.images[torch.tensor(members)].float().flatten(1) / 255
    mean, std = data.train.mean[0], data.train.std[0]
    shown = (view.candidates.cpu().flatten(1) * std + mean)
    matched = (shown[answer][:, None, :] - train[None, :, :]).abs().amax(2).min(1).values
    assert (matched < 1e-5).all()  # every member candidate is one of the client's records


def test_a_loss_test_on_a_gradient_is_refused_before_training():
    with pytest.raises(AttackNotApplicableError, match="attack.test=loss_change needs a model payload"):
        preflight(["attack=membership", "fl=fedavg", "payload=gradient"])


@pytest.mark.slow
def test_membership_inference_finds_the_members_of_an_overfit_update(tmp_path):
    got = {}
    for test in ("loss_change", "gradient_alignment", "loss"):
        result = privbench.run([*OVERFIT, f"attack.test={test}"], results_dir=tmp_path)
        privacy = result.metrics["privacy"]
        got[test] = privacy["mia_auc"]
        assert privacy["mia_test"] == test and privacy["mia_members"] == privacy["mia_non_members"] >= 50
        assert 0 <= privacy["mia_tpr_at_fpr_1pct_lo"] <= privacy["mia_tpr_at_fpr_1pct"] <= privacy["mia_tpr_at_fpr_1pct_hi"]
        assert (result.run_dir / "roc.png").is_file()
    # measured on the 2-core machine, seed 0: loss_change 0.632, gradient_alignment 0.665 (80 members)
    assert got["loss_change"] > 0.6 and got["gradient_alignment"] > 0.6
    assert all(not math.isnan(v) for v in got.values())
