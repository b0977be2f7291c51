"""Arms compared one factor at a time: paired differences over the seeds both arms ran, against values computed by
hand, and the report's page and file that list them."""
from __future__ import annotations

import pandas as pd
import pytest

from privbench.report.paired import contrasts, to_markdown


def _runs() -> pd.DataFrame:
    rows = []
    for attack, model, base in (("ig", "lenet", 10.0), ("idlg", "lenet", 0.0), ("idlg", "mlp", 5.0)):
        for seed, noise in ((0, 1.0), (1, 2.0), (2, 3.0)):
            rows.append({"attack": attack, "model": model, "seed": seed,
                         "psnr_gain": base + (noise if attack == "ig" else 0.0), "recovered_fraction": 0.5})
    rows.append({"attack": "idlg", "model": "mlp", "seed": 3, "psnr_gain": 99.0, "recovered_fraction": 0.5})
    return pd.DataFrame(rows)


def test_paired_differences_by_hand():
    found = contrasts(_runs(), ["attack", "model"])
    # ig/lenet vs idlg/lenet differ in the attack only; idlg/lenet vs idlg/mlp in the model; ig/lenet vs idlg/mlp in
    # both, so they are not compared
    assert {(c.factor, c.a, c.b, c.fixed) for c in found} == {("attack", "ig", "idlg", "model=lenet"),
                                                             ("model", "lenet", "mlp", "attack=idlg")}
    gain = next(c for c in found if c.factor == "attack" and c.figure == "psnr_gain")
    # differences idlg - ig per seed: -11, -12, -13: mean -12, sd 1, t(0.975, 2) = 4.3027
    assert (gain.n, gain.mean, gain.agree) == (3, -12.0, 3)
    assert gain.lo == pytest.approx(-12 - 4.302653 / 3 ** 0.5, abs=1e-5) and gain.holds
    model = next(c for c in found if c.factor == "model" and c.figure == "psnr_gain")
    assert (model.n, model.mean, model.lo, model.hi, model.holds) == (3, 5.0, 5.0, 5.0, True)  # seed 3: mlp only
    flat = next(c for c in found if c.factor == "model" and c.figure == "recovered_fraction")
    assert (flat.mean, flat.agree, flat.holds) == (0.0, 0, False)


def test_the_listing_is_signed_and_says_whether_it_holds():
    text = to_markdown(contrasts(_runs(), ["attack", "model"]))
    assert "| attack | ig -> idlg | model=lenet | PSNR gain over chance (dB) | 3 | -12.00 [-14.48, -9.52] | 3 of 3 | yes |" \
        in text
    assert contrasts(_runs(), []) == [] and contrasts(_runs().drop(columns="seed"), ["attack"]) == []


def test_a_key_one_arm_does_not_have_is_a_value_of_its_own():
    runs = pd.DataFrame({"defense": ["none", "none", "dpsgd", "dpsgd"], "defense.sigma": [float("nan")] * 2 + [1.0] * 2,
                         "seed": [0, 1, 0, 1], "mia_auc": [0.7, 0.8, 0.5, 0.6]})
    found = contrasts(runs, ["defense", "defense.sigma"])  # sigma is the dpsgd arm's own key: one factor
    assert [(c.factor, c.a, c.b, c.fixed, c.with_it, round(c.mean, 6)) for c in found] == [
        ("defense", "none", "dpsgd", "", "defense.sigma=-->1", -0.2)]
    two = runs.assign(**{"defense.sigma": [0.5, 0.5, 1.0, 1.0]})
    assert contrasts(two, ["defense", "defense.sigma"]) == []  # two values both arms have differ: not one factor
    arm = pd.DataFrame({"defense.sigma": [float("nan")] * 2 + [1.0] * 2, "defense.clip": [float("nan")] * 2 + [2.0] * 2,
                        "seed": [0, 1, 0, 1], "mia_auc": [0.7, 0.8, 0.5, 0.6]})  # an arm that adds two keys: one factor
    assert [(c.factor, c.with_it, round(c.mean, 6)) for c in contrasts(arm, ["defense.sigma", "defense.clip"])] == [
        ("defense.sigma", "defense.clip=-->2", -0.2)]
    crossed = pd.DataFrame({"attack": ["a"] * 4 + ["b"] * 4, "dp": ["-", "-", "on", "on"] * 2,
                            "seed": [0, 1] * 4, "mia_auc": [0.5, 0.6, 0.4, 0.5, 0.7, 0.8, 0.6, 0.7]})
    crossed["dp"] = crossed["dp"].replace("-", float("nan"))  # the DP arm is an axis of its own, crossed with attack
    found = {(c.a, c.b, c.fixed) for c in contrasts(crossed, ["attack", "dp"]) if c.figure == "mia_auc"}
    assert found == {("a", "b", "dp=-"), ("a", "b", "dp=on"), ("-", "on", "attack=a"), ("-", "on", "attack=b")} \
        or found == {("a", "b", "dp=-"), ("a", "b", "dp=on"), ("on", "-", "attack=a"), ("on", "-", "attack=b")}
    mutual = arm.assign(**{"defense.clip": [2.0] * 2 + [float("nan")] * 2})  # each has a key the other lacks: two
    assert contrasts(mutual, ["defense.sigma", "defense.clip"]) == []
    found = contrasts(runs.assign(**{"defense.sigma": [float("nan")] * 4}), ["defense", "defense.sigma"])
    assert [(c.factor, c.a, c.b, c.fixed, round(c.mean, 6)) for c in found] == [
        ("defense", "none", "dpsgd", "defense.sigma=-", -0.2)]


def test_repeated_runs_of_a_seed_are_averaged_and_values_set_with_the_factor_are_named():
    runs = pd.DataFrame({"attack": ["ig", "ig", "ig", "dlg", "dlg"], "attack.tie": ["a", "a", "a", "b", "b"],
                         "seed": [0, 0, 1, 0, 1], "psnr_gain": [1.0, 3.0, 2.0, 5.0, 6.0]})
    (c,) = [c for c in contrasts(runs, ["attack"]) if c.figure == "psnr_gain"]
    # seed 0: ig's two runs average 2, dlg 5 (+3); seed 1: 2 -> 6 (+4): two pairs, not three
    assert (c.n, c.mean, c.with_it) == (2, 3.5, "attack.tie=a->b")
    assert "| attack (with attack.tie=a->b) | ig -> dlg |" in to_markdown([c])
