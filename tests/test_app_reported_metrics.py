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


def _states(count: int) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(2)
    return [{"weight": torch.randn(CLASSES, DIM, generator=gen) / 2, "bias": torch.randn(CLASSES, generator=gen)}
            for _ in range(count)]


def _run(counts: list[int], *, rounds: int = 6, keys: tuple[str, ...] = ("eval_loss", "eval_acc"),
         same: bool = True) -> AppRun:
    """Client 0 evaluates its own ``counts[c]`` records of each class (drawn apart from the public ones) in every
    round and reports the mean loss and accuracy of the model sent; client 1 evaluates the public records; node
    10 + c is client c."""
    x, y = _public()
    mine_x, mine_y = _draw(counts, seed=3)
    messages, models = [], []
    for r, state in enumerate(_states(rounds), start=1):
        models.append(Broadcast("evaluate", r, state, [f"e{r}-0", f"e{r}-1"], same))
        logits = mine_x @ state["weight"].T + state["bias"]
        figures = {"eval_loss": float(F.cross_entropy(logits, mine_y)),
                   "eval_acc": float((logits.argmax(1) == mine_y).double().mean()), "num-examples": len(mine_y)}
        messages.append(Sent("up", "evaluate", r, 10, 0, 0, metrics={k: figures[k] for k in (*keys, "num-examples")},
                             message_id=f"e{r}-0"))
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
    assert means["accuracy"].tolist()[:2] == [1.0, 1.0] and math.isnan(means["loss"][2].item())


def test_a_client_s_shares_come_back_from_its_reports_as_the_rounds_add_figures():
    """Shares 0.5/0.1/0.1/0.3 over 400 records of its own, against a uniform prior (total variation 0.3): one
    round's two figures move the fit part of the way, ten rounds' twenty bring it within 0.1, the largest share
    right, held to the prior exactly as far as the figures' noise allows."""
    one = client_proportions(_run([200, 40, 40, 120], rounds=1), _model, "client0", _public())
    assert one["equations"] == 2 and one["class_proportion_error_chance"] == pytest.approx(0.3)
    assert 0.1 < one["class_proportion_error"] < 0.3
    ten = client_proportions(_run([200, 40, 40, 120], rounds=10), _model, "client0", _public())
    assert ten["true_proportions"] == [0.5, 0.1, 0.1, 0.3] and ten["read_as"] == {"eval_acc": "accuracy",
                                                                                  "eval_loss": "loss"}
    assert ten["class_proportion_error"] < 0.1 and ten["top_class"] == 1.0 and ten["top_class_chance"] == 0.25  # a 4-way tie
    assert ten["misfit"] == pytest.approx(ten["equations"], rel=1e-3) and 0 < ten["ridge"] < math.inf


def test_a_client_with_the_prior_s_shares_is_not_read_as_skewed():
    """A uniform client: the figures agree with the prior to their noise, and the fit stays there (an
    unregularised fit of twenty noisy figures would chase the noise)."""
    got = client_proportions(_run([100, 100, 100, 100], rounds=10), _model, "client0", _public())
    assert got["class_proportion_error"] < 0.02 and got["class_proportion_error_chance"] == 0.0


def test_the_noise_model_fits_the_figures_misfit_at_the_true_shares():
    """At the true shares, the weighted misfit of 80 figures is a chi-square of about 80 if each figure's noise is
    what ``equation_variance`` says (between 40 and 160 here; a noise model off by 2 in sigma would leave it)."""
    from privbench.app_audit.reported import _equations, reports

    run, public, net = _run([200, 40, 40, 120], rounds=40), _public(), _model()
    told = reports(run, "client0", {"weight", "bias"})
    a, b, sigma = _equations(net, told, public, CLASSES, torch.tensor([0.5, 0.1, 0.1, 0.3], dtype=torch.float64))
    misfit = float((((a @ torch.tensor([0.5, 0.1, 0.1, 0.3], dtype=torch.float64) - b) / sigma) ** 2).sum())
    assert 40 < misfit < 160, misfit


def test_figures_it_cannot_read_and_models_sent_apart_are_not_read():
    with pytest.raises(AttackNotApplicableError, match="no evaluate reply with a loss or accuracy"):
        client_proportions(_run([10, 10, 10, 10], keys=()), _model, "client0", _public())
    with pytest.raises(AttackNotApplicableError, match="no evaluate reply"):
        client_proportions(_run([10, 10, 10, 10], same=False), _model, "client0", _public())
    x, y = _public()
    keep = y != 2
    with pytest.raises(AttackNotApplicableError, match=r"no record of class\(es\) \[2\]"):
        client_proportions(_run([10, 10, 10, 10]), _model, "client0", (x[keep], y[keep]))
    rows = reported_metrics(_run([10, 10, 10, 10]), _model, {"client0": None, "client1": _public()})
    assert rows[0] == {"client": "client0", "skipped": "no other client's evaluation records to serve as public data"}
    assert "no evaluate reply" in rows[1]["skipped"]  # client 1 reported nothing
