"""attack.complete=public: the layers an upload lacks fitted on public records, each stacked model as if alone, the
sent layers untouched; and LiRA recording what it did."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import privbench
from privbench.attacks.membership.completion import complete_upload, completed, fit_unsent, public_accuracy
from privbench.attacks.membership.lira import LiRA
from privbench.errors import AttackNotApplicableError

SENT = {"1.weight", "1.bias"}


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def _stacked(model: nn.Module, members: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return {n: p.detach().unsqueeze(0) + 0.1 * torch.randn(members, *p.shape) for n, p in model.named_parameters()}


def _data(n: int = 90) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(2)
    labels = torch.arange(n) % 3
    centres = torch.tensor([[3.0, 0, 0, 0], [0, 3.0, 0, 0], [0, 0, 3.0, 0]])
    return (centres[labels] + 0.3 * torch.randn(n, 4)).view(n, 1, 2, 2), labels


def test_only_the_unsent_layers_move_and_each_stacked_model_is_fitted_as_if_alone():
    model, (x, y) = _model(), _data()
    stacked = _stacked(model, 3)
    fitted = fit_unsent(model, stacked, SENT, x, y, steps=40, generator=torch.Generator().manual_seed(5))
    assert all(torch.equal(fitted[n], stacked[n]) for n in SENT)
    assert all(not torch.allclose(fitted[n], stacked[n]) for n in ("3.weight", "3.bias"))
    alone = fit_unsent(model, {n: t[1:2] for n, t in stacked.items()}, SENT, x, y, steps=40,
                       generator=torch.Generator().manual_seed(5))  # the same batches: member 1 on its own
    assert all(torch.allclose(alone[n][0], fitted[n][1], atol=1e-5) for n in alone)
    every = {n for n, _ in model.named_parameters()}
    assert all(torch.equal(t, stacked[n]) for n, t in fit_unsent(model, stacked, every, x, y, steps=40,
                                                                  generator=torch.Generator()).items())


def test_a_head_fitted_on_public_records_classifies_them_and_the_accuracy_is_counted_by_hand():
    model, (x, y) = _model(), _data()
    stacked = _stacked(model, 2)
    stacked["3.weight"].zero_()
    stacked["3.bias"].zero_()  # every class scores alike: argmax says class 0, a third right
    assert public_accuracy(model, stacked, x, y).tolist() == pytest.approx([1 / 3, 1 / 3])
    target = {n: t[0] for n, t in stacked.items()}
    state, shadows, info = completed(model, target, {n: t[1:] for n, t in stacked.items()}, SENT, x, y, steps=300,
                                     generator=torch.Generator().manual_seed(5))
    plain = _model()
    plain.load_state_dict(state)
    by_hand = float((plain(x).argmax(1) == y).float().mean())
    assert info["completed_target_public_accuracy"] == pytest.approx(by_hand, abs=1e-4) and by_hand > 0.9
    assert shadows["3.weight"].shape == (1, 3, 8) and info["completed_shadows_public_accuracy"] > 0.9
    with pytest.raises(ValueError, match="attack.complete='head': allowed base, public"):
        LiRA(complete="head")


def test_the_fit_takes_population_records_no_shadow_drew_and_refuses_when_none_is_left():
    model, (x, y) = _model(), _data(12)
    shadows = _stacked(model, 2)
    # 4 candidates, then 8 population records; the shadows drew candidates 0-3 and population rows 4-7
    datasets = torch.tensor([[0, 1, 4, 5], [2, 3, 6, 7]])
    target, fitted, info = complete_upload(model, model, shadows, SENT, x, y, datasets, 4, steps=3,
                                           generator=torch.Generator().manual_seed(0))
    assert info["completion"] == "2 unsent tensors fitted on 4 population records no shadow trained on"
    alone = completed(model, dict(model.named_parameters()), shadows, SENT, x[8:], y[8:], steps=3,
                      generator=torch.Generator().manual_seed(0))  # rows 8-11 by hand
    assert torch.allclose(fitted["3.weight"], alone[1]["3.weight"]) and torch.equal(target[1].weight, model[1].weight)
    with pytest.raises(AttackNotApplicableError, match="the shadows drew all 8"):
        complete_upload(model, model, shadows, SENT, x, y, torch.tensor([[4, 5, 6, 7], [8, 9, 10, 11]]), 4,
                        steps=3, generator=torch.Generator())
    every = {n for n, _ in model.named_parameters()}
    same, unchanged, info = complete_upload(model, model, shadows, every, x, y, datasets, 4, steps=3,
                                            generator=torch.Generator())
    assert same is model and info == {"completion": "nothing unsent: the upload carries every layer"}


@pytest.mark.slow  # 13 s
def test_lira_completes_a_learngene_and_says_so(tmp_path):
    run = privbench.run(["fl=genefl", "payload=learngene", "attack=lira", "attack.shadows=2", "attack.complete=public",
                         "attack.complete_steps=50", "fl.rounds=1", "victim.num_images=8"], results_dir=tmp_path)
    privacy = run.metrics["privacy"]
    # a learnGene of LeNet's first two convolutions: the third and the head (4 tensors) fitted; measured 0.70 and
    # 0.72 on 192 records of the batch's classes, where a head at initialisation scores near a class's share
    assert privacy["completion"].startswith("4 unsent tensors fitted on")
    assert privacy["completed_target_public_accuracy"] > 0.5 and privacy["completed_shadows_public_accuracy"] > 0.5
    threat = json.loads((run.run_dir / "threat_model.json").read_text())
    assert threat["attack_budget"]["unsent_layers"].startswith("where the upload lacks layers, fitted on population")
