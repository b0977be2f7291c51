"""Class proportions from a Flower client's reported evaluation figures (``attacks/property/reported_metrics.py``,
``app_audit/reported.py``), on runs built by hand where the figures a client reports are computed here from its
records, so the shares they imply are known exactly."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from privbench.app_audit.recording import Broadcast, Sent
from privbench.app_audit.reported import client_proportions, reported_metrics
from privbench.app_audit.simulation import AppRun
from privbench.attacks.property.reported_metrics import fit_proportions, per_class_means, total_variation
from privbench.errors import AttackNotApplicableError

DIM, CLASSES = 8, 4


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(DIM, CLASSES)


def _draw(counts: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``counts[c]`` records of class c: a Gaussian around the class's own centre."""
    centres = 2 * torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(9))
    gen = torch.Generator().manual_seed(seed)
    y = torch.cat([torch.full((k,), c) for c, k in enumerate(counts)])
    return centres[y] + torch.randn(len(y), DIM, generator=gen), y


def _public() -> tuple[torch.Tensor, torch.Tensor]:
    return _draw([100] * CLASSES, seed=1)


def _states(count: int, seed: int = 2) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [{"weight": torch.randn(CLASSES, DIM, generator=gen) / 2, "bias": torch.randn(CLASSES, generator=gen)}
            for _ in range(count)]


def _run(counts: list[int], *, rounds: int = 6, keys: tuple[str, ...] = ("eval_loss", "eval_acc"),
         same: bool = True, seed: int = 3, scale: float = 1.0, sizes: bool = True, extra: bool = False) -> AppRun:
    """Client 0 evaluates its own ``counts[c]`` records of each class (drawn apart from the public ones, by
    ``seed``) in every round and reports the mean loss (times ``scale``) and accuracy of the model sent, with its
    ``num-examples`` where ``sizes``; client 1 evaluates the public records; node 10 + c is client c. ``extra``:
    the evaluate messages carry an array the model does not have."""
    x, y = _public()
    mine_x, mine_y = _draw(counts, seed=seed)
    messages, models = [], []
    for r, state in enumerate(_states(rounds, seed=seed - 1), start=1):
        models.append(Broadcast("evaluate", r, {**state, **({"extra": torch.ones(2)} if extra else {})},
                                [f"e{r}-0", f"e{r}-1"], same))
        logits = mine_x @ state["weight"].T + state["bias"]
        figures = {"eval_loss": scale * float(F.cross_entropy(logits, mine_y)),
                   "eval_acc": float((logits.argmax(1) == mine_y).double().mean()), "num-examples": len(mine_y)}
        messages.append(Sent("up", "evaluate", r, 10, 0, 0, message_id=f"e{r}-0",
                             metrics={k: figures[k] for k in (*keys, *(["num-examples"] if sizes else []))}))
    notes = [{"node": 10, "type": "evaluate", "message_id": f"e{r}-0", "inputs": mine_x[:0], "labels": mine_y[:0],
              "held_inputs": mine_x, "held_labels": mine_y} for r in range(1, rounds + 1)]
    notes += [{"node": 11, "type": "evaluate", "message_id": f"e{r}-1", "inputs": x[:0], "labels": y[:0],
               "held_inputs": x, "held_labels": y} for r in range(1, rounds + 1)]
    return AppRun(messages, notes, partitions={10: 0, 11: 1}, models=models)


def test_planted_shares_come_back_where_the_figures_determine_them():
    gen = torch.Generator().manual_seed(3)
    rows = torch.rand(12, 10, generator=gen, dtype=torch.float64)
    planted = torch.distributions.Dirichlet(torch.full((10,), 0.5)).sample()
    got = fit_proportions(rows, rows @ planted.double(), torch.full((10,), 0.1))
    assert float((got - planted).abs().max()) < 1e-4
    assert total_variation(got, planted) < 1e-4


def test_per_class_figures_by_hand():
    net = nn.Linear(1, 2, bias=False)
    net.weight.data = torch.tensor([[1.0], [-1.0]])
    x, y = torch.tensor([[1.0], [2.0], [-1.0]]), torch.tensor([0, 0, 1])
    means = per_class_means(net, x, y, 3)
    # logits (x, -x): class 0's records have losses log(1 + e^(-2x)) at x = 1, 2; class 1's at x = -1: log(1 + e^-2)
    assert means["loss"][0].item() == pytest.approx((math.log1p(math.exp(-2)) + math.log1p(math.exp(-4))) / 2)
    assert means["loss"][1].item() == pytest.approx(math.log1p(math.exp(-2)))
    assert means["hit_rate"].tolist()[:2] == [1.0, 1.0] and math.isnan(means["loss"][2].item())


def test_a_client_s_shares_come_back_from_its_reports_as_the_rounds_add_figures():
    """Shares 0.5/0.1/0.1/0.3 over 400 records of its own, against a uniform prior (total variation 0.3): one
    round's two figures move the fit part of the way, ten rounds' twenty bring it within 0.1, the largest share
    right, held to the prior exactly as far as the figures' noise allows."""
    one = client_proportions(_run([200, 40, 40, 120], rounds=1), _model, "client0", _public())
    assert one["equations"] == 2 and one["class_proportion_error_chance"] == pytest.approx(0.3)
    assert 0.1 < one["class_proportion_error"] < 0.3
    ten = client_proportions(_run([200, 40, 40, 120], rounds=10), _model, "client0", _public())
    assert ten["true_proportions"] == [0.5, 0.1, 0.1, 0.3] and ten["read_as"] == {"eval_acc": "hit_rate",
                                                                                  "eval_loss": "loss"}
    assert ten["class_proportion_error"] < 0.1 and ten["top_class"] == 1.0
    assert ten["top_class_chance"] == 0.25  # the uniform prior: a 4-way tie
    assert ten["misfit"] == pytest.approx(ten["equations"], rel=1e-3) and 0 < ten["ridge"] and not ten["held_at_prior"]


def test_a_client_with_the_prior_s_shares_is_not_read_as_skewed():
    """A uniform client: the figures agree with the prior to their noise, and the fit stays there (an
    unregularised fit of twenty noisy figures would chase the noise)."""
    got = client_proportions(_run([100, 100, 100, 100], rounds=10), _model, "client0", _public())
    assert got["class_proportion_error"] < 0.02 and got["class_proportion_error_chance"] == 0.0


def test_the_noise_model_fits_the_figures_misfit_at_the_true_shares():
    """At the true shares, each figure's standardised residual has variance 1 if ``equation_variance`` is right:
    the weighted misfit over 40 rounds' 80 figures, averaged over 10 draws of the client and the models, is within
    15 % of 80 (a variance off by a third, or the client's own-records term left out, would leave it)."""
    from privbench.app_audit.reported import _equations, reports

    true = torch.tensor([0.5, 0.1, 0.1, 0.3], dtype=torch.float64)
    ratios = []
    for seed in range(10):
        run, net = _run([200, 40, 40, 120], rounds=40, seed=10 + seed), _model()
        keys = _equations(net, reports(run, "client0", {"weight", "bias"}), _public(), CLASSES, true, fallback=1)
        a, b, sigma = (torch.cat(parts) for parts in zip(*keys.values()))
        ratios.append(float((((a @ true - b) / sigma) ** 2).sum()) / len(b))
    assert 0.85 < sum(ratios) / len(ratios) < 1.15, ratios


def test_figures_that_are_no_means_of_the_model_sent_are_not_read_and_not_gated():
    """A loss divided by the batch size (an old tutorial's slip) lies outside the model's per-class range: the key
    is not read and the accuracy alone is fitted, or, with no other key, nothing is; an accuracy balanced over
    classes sits in range, but no mixture explains it with the loss: the client is left out of the gate."""
    from privbench.app_audit.reported import gain

    halved = client_proportions(_run([200, 40, 40, 120], rounds=10, scale=1 / 32), _model, "client0", _public())
    assert "eval_loss" in halved["not_read"] and halved["read_as"] == {"eval_acc": "hit_rate"}
    assert halved["equations"] == 10
    with pytest.raises(AttackNotApplicableError, match="eval_loss: .*outside the model's per-class loss range"):
        client_proportions(_run([200, 40, 40, 120], keys=("eval_loss",), scale=1 / 32), _model, "client0", _public())
    skewed = _run([200, 40, 40, 120], rounds=10)  # its accuracy balanced over classes: each figure in range
    x, y = _draw([200, 40, 40, 120], seed=3)
    for m, state in zip(skewed.messages, _states(10, seed=2)):
        hit = (x @ state["weight"].T + state["bias"]).argmax(1) == y
        m.metrics["eval_acc"] = float(torch.stack([hit[y == c].double().mean() for c in range(CLASSES)]).mean())
    skewed = client_proportions(skewed, _model, "client0", _public())
    assert skewed["not_read"] == {} and skewed["consistent"] is False
    assert skewed["best_misfit"] > 9 * skewed["equations"]
    fine = client_proportions(_run([200, 40, 40, 120], rounds=10), _model, "client0", _public())
    assert fine["consistent"] is True and gain([skewed, fine]) == [fine["class_proportion_error_chance"]
                                                                   - fine["class_proportion_error"]]
    assert gain([{"client": "client0", "skipped": "no evaluate reply with a loss or accuracy figure of a model "
                                                  "sent alike to all"}]) == [0.0]  # nothing reported: nothing exposed
    assert gain([{"client": "client0", "skipped": "no other client's evaluation records"}]) is None


def test_without_num_examples_the_other_clients_mean_count_stands_in_and_extra_arrays_are_ignored():
    got = client_proportions(_run([100, 100, 100, 100], rounds=10, sizes=False, extra=True), _model, "client0",
                             _public())
    assert got["noise_model"].endswith("(the other clients' mean count)")
    assert got["class_proportion_error"] < 0.02


def test_figures_it_cannot_read_and_models_sent_apart_are_not_read():
    with pytest.raises(AttackNotApplicableError, match="no evaluate reply with a loss or accuracy"):
        client_proportions(_run([10, 10, 10, 10], keys=()), _model, "client0", _public())
    with pytest.raises(AttackNotApplicableError, match="figures are of models not sent alike"):
        client_proportions(_run([10, 10, 10, 10], same=False), _model, "client0", _public())
    shared = _run([10, 10, 10, 10])
    mine = (shared.notes[0]["held_inputs"], shared.notes[0]["held_labels"])
    with pytest.raises(AttackNotApplicableError, match="a shared evaluation set"):
        client_proportions(shared, _model, "client0", mine)
    from privbench.app_audit.reported import gain

    apart = reported_metrics(_run([10, 10, 10, 10], same=False), _model, {"client0": _public()})
    assert gain(apart) is None  # figures reported but not read: no evidence, so the gate cannot pass
    x, y = _public()
    keep = y != 2
    with pytest.raises(AttackNotApplicableError, match=r"no record of class\(es\) \[2\]"):
        client_proportions(_run([10, 10, 10, 10]), _model, "client0", (x[keep], y[keep]))
    rows = reported_metrics(_run([10, 10, 10, 10]), _model, {"client0": None, "client1": _public()})
    assert rows[0] == {"client": "client0", "skipped": "no other client's evaluation records to serve as public data"}
    assert "no evaluate reply" in rows[1]["skipped"]  # client 1 reported nothing
