"""The membership ladder: online shadows spread evenly over a pool larger than two shadows hold, extra non-members
drawn in the members' class proportions from records no model trained on, each rung's figures by hand, rungs that
cannot run named with why, and an overfit client's ladder on 1,000 non-members (slow)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

import privbench
from privbench.attacks.membership.ladder import MembershipLadder
from privbench.attacks.membership.lira import Confidences, shadow_datasets
from privbench.audit.games.membership import extra_non_members, untouched_records
from privbench.audit.games.membership_ladder import ladder_lines, rung_figures
from privbench.errors import AttackNotApplicableError
from privbench.report.ladder import ladder_markdown

#: tests/test_lira.py's overfit client: 80 images of 8 classes, 30 local epochs of batch 8, round 1's update.
OVERFIT = ["fl=fedavg", "payload=update", "victim.update_data=all", "fl.local_epochs=30", "data.num_clients=60",
           "data.partition=iid", "fl.participants=5", "fl.rounds=2", "victim.round=1", "fl.batch_size=8",
           "metrics.lpips=false"]


def test_online_shadows_cover_a_large_pool_evenly() -> None:
    """10 candidates, shadows of 3 records, 8 shadows: 24 places over 10 candidates, so each is in 2 or 3 shadows
    (a random half-split would leave some in none); no shadow holds a candidate twice."""
    labels = torch.tensor([0, 1] * 5)
    population = torch.tensor([0, 1] * 20)
    rows, inside = shadow_datasets(labels, population, 3, 8, online=True, generator=torch.Generator().manual_seed(1))
    assert sorted(set(inside.sum(0).tolist())) == [2, 3] and int(inside.sum()) == 24
    for k in range(8):
        assert len(set(rows[k].tolist())) == 3 and set(rows[k].tolist()) == set(inside[k].nonzero().flatten().tolist())


def test_extra_non_members_follow_the_members_class_proportions() -> None:
    """Members 3 of class 0 and 1 of class 1; 8 wanted: 6 and 2, all from the untouched rows, none twice."""
    labels = torch.tensor([0] * 10 + [1] * 10 + [2] * 10)
    untouched = torch.tensor([1, 2, 3, 4, 5, 6, 7, 11, 12, 13, 21, 22])
    got = extra_non_members(labels, torch.tensor([0, 0, 0, 1]), untouched, 8, torch.Generator().manual_seed(0))
    assert len(set(got)) == 8 and set(got) <= set(untouched.tolist())
    assert sorted(labels[got].tolist()) == [0] * 6 + [1] * 2
    with pytest.raises(AttackNotApplicableError, match="class 1 needs 4 train records no model trained on and has 3"):
        extra_non_members(labels, torch.tensor([0, 1]), untouched, 8, torch.Generator())


class _Store:
    """Client 0's update of round 0 (truth rows 0-1), client 2's learnGene of round 2 (after the audited round), the
    server's round-1 model (truth row 9), client 1's subspace basis of round 0 (rows 3-5: it trains no model)."""

    def records(self):
        return iter([{"id": "a", "round": 0, "sender": "client0", "kind": "update"},
                     {"id": "b", "round": 2, "sender": "client2", "kind": "learngene"},
                     {"id": "c", "round": 1, "sender": "server", "kind": "global_model"},
                     {"id": "d", "round": 0, "sender": "client1", "kind": "subspace"}])

    def truth(self, payload_id):
        return {"a": [0, 1], "b": [8], "c": [9], "d": [3, 4, 5]}[payload_id]


class _Data:
    """Three clients of 3 train rows each, one agnostic client of rows 9-10; 12 train rows."""

    clients = [np.array([0, 1, 2]), np.array([3, 4, 5]), np.array([6, 7, 8])]
    agnostic_clients = [np.array([9, 10])]

    class train:
        labels = torch.zeros(12)


def test_untouched_records_leave_out_every_sender_up_to_the_round() -> None:
    """Round 1: client 0 sent (its whole dataset counts, not only its truth rows), the server's round-1 message's
    truth counts, client 2's round-2 message does not, client 1's basis does not, the agnostic client always does:
    rows 3-8 and 11 are left."""
    assert untouched_records(_Store(), _Data(), 1).tolist() == [3, 4, 5, 6, 7, 8, 11]  # type: ignore[arg-type]
    assert untouched_records(_Store(), _Data(), 2).tolist() == [3, 4, 5, 11]  # type: ignore[arg-type]


def test_rung_figures_by_hand() -> None:
    """Scores 0.9 (member), 0.8 (non), 0.7 (member), 0.1 (non): 3 of 4 pairs ordered, AUC 0.75; at FPR 1 % no false
    positive is allowed, so the TPR is the members above the best non-member: 1 of 2."""
    got = rung_figures(np.array([0.9, 0.8, 0.7, 0.1]), np.array([True, False, True, False]))
    assert got["auc"] == pytest.approx(0.75) and got["tpr_1"] == pytest.approx(0.5)
    assert got["tpr_1_lo"] < 0.5 < got["tpr_1_hi"]


def test_rungs_that_cannot_run_say_why() -> None:
    """Planted confidences (logit-scaled): the references put every record at 0; the target puts members (the first 4
    of 8 candidates) 3 above them, non-members at them, the 4 population records 1 above. References 0-1 hold
    candidates 0-3, references 2-3 candidates 4-7. LiRA at one reference is refused (a Gaussian needs two); at two
    references candidates 0-3 have none without them and 4-7 none with them, so online LiRA and online RMIA are
    refused; at four both run,
    and every offline rung, and online RMIA, ranks the members first."""
    ladder = MembershipLadder(references=(1, 4), headline="rmia_offline@4")
    base = torch.zeros(12, dtype=torch.float64)
    refs = base.expand(4, 12).clone()
    target = base + torch.tensor([3.0] * 4 + [0.0] * 4 + [1.0] * 4, dtype=torch.float64)
    inside = torch.zeros(4, 8, dtype=torch.bool)
    inside[:2, :4] = True
    inside[2:, 4:] = True
    scored = Confidences(target, refs, inside, {})
    with pytest.raises(AttackNotApplicableError, match="needs two"):
        ladder._rung("lira_offline", 1, scored, 8)
    for test in ("lira_online", "rmia_online"):
        with pytest.raises(AttackNotApplicableError, match="2 references cover 0 of 8"):
            ladder._rung(test, 2, scored, 8)
    assert ladder._rung("lira_online", 4, scored, 8).shape == (8,)
    members = np.array([True] * 4 + [False] * 4)
    for test, k in (("rmia_offline", 1), ("rmia_offline", 4), ("rmia_online", 4), ("lira_offline", 4)):
        assert rung_figures(ladder._rung(test, k, scored, 8).numpy(), members)["auc"] == 1.0, (test, k)


def test_bad_ladders_are_refused() -> None:
    with pytest.raises(ValueError, match="attack.headline='rmia_online@3'"):
        MembershipLadder(references=(1, 2), headline="rmia_online@3")
    with pytest.raises(ValueError, match="attack.references"):
        MembershipLadder(references=(), headline="loss")


def test_the_summary_prints_each_rung_or_why_not() -> None:
    privacy = {"mia_members": 2, "mia_non_members": 3, "mia_ladder": [
        {"rung": "loss", "auc": 0.61, "tpr_1": 0.5, "tpr_1_lo": 0.1, "tpr_1_hi": 0.9, "tpr_01": 0.5,
         "tpr_01_lo": 0.1, "tpr_01_hi": 0.9}, {"rung": "lira_offline@1", "skipped": "it needs two"}]}
    text = "\n".join(t for _, t in ladder_lines(privacy, {}))
    assert "2 members, 3 non-members" in text and "loss: 0.610, 0.500 [0.100, 0.900]" in text
    assert "lira_offline@1: not run (it needs two)" in text


@pytest.mark.slow  # about 60 s: 8 offline and 8 online shadows, 1,080 candidates
def test_the_ladder_of_an_overfit_update(tmp_path) -> None:
    got = privbench.run([*OVERFIT, "attack=mia_ladder", "attack.references=[1,8]", "attack.headline=rmia_offline@8",
                         "attack.non_members=1000"], results_dir=tmp_path)
    privacy = got.metrics["privacy"]
    assert privacy["mia_members"] == 80 and privacy["mia_non_members"] == 1000
    rungs = {r["rung"]: r for r in privacy["mia_ladder"]}
    assert set(rungs) == {"loss", "loss_change", "gradient_alignment", "lira_offline@1", "lira_online@1",
                          "rmia_offline@1", "rmia_online@1", "lira_offline@8", "lira_online@8", "rmia_offline@8",
                          "rmia_online@8"}
    assert "skipped" in rungs["lira_offline@1"]  # a Gaussian needs two references
    for online in ("lira_online@8", "rmia_online@8"):  # 8 x 80 places cannot hold each of 1,080 candidates
        assert "references cover" in rungs[online]["skipped"]
    assert rungs["rmia_offline@8"]["auc"] == pytest.approx(privacy["mia_auc"])  # the headline is the run's figure
    assert rungs["rmia_offline@8"]["auc"] > 0.7 and rungs["rmia_offline@8"]["auc"] > rungs["loss"]["auc"] + 0.05
    saved = np.load(got.run_dir / "membership.npz")
    assert int((~saved["members"]).sum()) == 1000
    threat = json.loads((got.run_dir / "threat_model.json").read_text())
    assert threat["attack_budget"]["references"] == [1, 8]
    assert "train-split records no model it derives from trained on" in threat["candidate_pool"]


def test_the_report_averages_each_rung_and_pairs_it_over_seeds(tmp_path) -> None:
    """Two seeds of one setting: loss AUC 0.6 and 0.7 against lira_online@64's 0.65 and 0.85, so the mean is 0.650
    and the paired difference -0.100 (each seed below: above in 0 of 2); a rung no seed ran says why."""
    rows = []
    for seed, (loss, lira) in enumerate(((0.6, 0.65), (0.7, 0.85))):
        run = tmp_path / f"s{seed}"
        run.mkdir()
        rung = {"tpr_1": 0.1, "tpr_01": 0.0}
        ladder = [{"rung": "loss", "auc": loss, **rung}, {"rung": "lira_online@64", "auc": lira, **rung},
                  {"rung": "lira_offline@1", "skipped": "it needs two"}]
        (run / "metrics.json").write_text(json.dumps({"privacy": {"mia_ladder": ladder}}))
        rows.append({"fl": "fedavg", "seed": seed, "run_dir": run.name})
    text = ladder_markdown(pd.DataFrame(rows), ["fl", "seed"], tmp_path)
    assert text is not None and "| fl=fedavg | 0, 1 | loss | 0.650 [" in text
    assert "| -0.100 [" in text and "above in 0 of 2 |" in text
    assert "| lira_offline@1 | not run: it needs two |" in text
    assert ladder_markdown(pd.DataFrame([{"fl": "x", "seed": 0, "run_dir": "gone"}]), ["fl"], tmp_path) is None
