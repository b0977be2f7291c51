"""Property inference on a subspace: the captured energy and the gap rule by hand, a planted client, the class-set
figures against the frequency prior, and the attack end to end on GENE-FL's clustering message."""
from __future__ import annotations

import pytest
import torch

import privbench
from privbench.attacks.property.class_set import SubspaceClassSet, captured_energy, proportions_fit, subspace_distance
from privbench.attacks.views import BasisView
from privbench.audit.summary import summary
from privbench.fl.clustering.subspace import client_subspace, per_class_subspace
from privbench.metrics.labels import class_set_scores, proportion_scores


def _classes(n: int = 40, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Images of 6 classes, each its own template of 8x8 pixels plus noise (templates drawn at random)."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(6, 1, 8, 8, generator=g)
    labels = torch.arange(6).repeat_interleave(n)
    return templates[labels] + 0.3 * torch.randn(len(labels), 1, 8, 8, generator=g), labels


def test_captured_energy_is_the_projection_share():
    basis = torch.randn(64, 3, generator=torch.Generator().manual_seed(1))
    x = torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    q, _ = torch.linalg.qr(basis.double())
    flat = x.flatten(1).double()
    projected = flat @ q @ q.T
    assert torch.allclose(captured_energy(basis, x), (projected ** 2).sum(1) / (flat ** 2).sum(1))
    assert subspace_distance(basis, basis @ torch.randn(3, 3, generator=torch.Generator().manual_seed(3))) < 1e-5


@pytest.mark.parametrize("held, form", [({1, 4}, "svd"), ({0, 2, 5}, "svd"), ({1, 4}, "pacfl")])
def test_a_planted_client_s_classes_are_found(held, form):
    images, labels = _classes()
    public, public_labels = _classes(seed=0)
    public = public + 0.3 * torch.randn(public.shape, generator=torch.Generator().manual_seed(9))  # other draws
    mine = torch.isin(labels, torch.tensor(sorted(held)))
    basis = (client_subspace(images[mine], 5) if form == "svd"
             else per_class_subspace(images[mine], labels[mine], 5, client_subspace))
    view = BasisView(basis, (1, 8, 8), (0.0,), (1.0,), public=public, public_labels=public_labels)
    found = SubspaceClassSet(form=form, dim=5).attack(view, seed=0)
    assert set(found.value) == held


def _low_rank(counts: dict[int, int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Images of 6 classes, each a Gaussian on its own 4-dimensional subspace of 8x8 pixels (scales 3, 2, 1.5, 1)
    plus noise; ``counts[c]`` images of class ``c``, drawn with ``seed`` (the subspaces are fixed)."""
    bases = torch.randn(6, 64, 4, generator=torch.Generator().manual_seed(0)) * torch.tensor([3.0, 2.0, 1.5, 1.0])
    g = torch.Generator().manual_seed(seed)
    xs = [(bases[c] @ torch.randn(4, n, generator=g)).T + 0.1 * torch.randn(n, 64, generator=g)
          for c, n in counts.items()]
    return torch.cat(xs).reshape(-1, 1, 8, 8), torch.tensor([c for c, n in counts.items() for _ in range(n)])


@pytest.mark.parametrize("mix", [{1: 150, 4: 50}, {0: 60, 2: 30, 5: 10}])
def test_a_planted_client_s_class_proportions_are_read_off_its_basis(mix):
    public, labels = _low_rank({c: 200 for c in range(6)}, seed=1)
    images, truth = _low_rank(mix, seed=2)  # the client's own draws, not the public ones
    found = proportions_fit(client_subspace(images, 5), public, labels)
    assert sorted(found) == list(range(6)) and sum(found.values()) == pytest.approx(1.0)
    out = proportion_scores(found, truth, torch.ones(6) / 6, set(mix))
    assert out["class_proportion_error"] < 0.1  # 0.055 and 0.072 on the 2-core machine of 2026-12-03
    n = sum(mix.values())
    prior = 0.5 * sum(abs(1 / 6 - mix.get(c, 0) / n) for c in range(6))  # the uniform prior, by hand
    assert out["class_proportion_error_chance"] == pytest.approx(prior)
    view = BasisView(client_subspace(images, 5), (1, 8, 8), (0.0,), (1.0,), public=public, public_labels=labels)
    attacked = SubspaceClassSet(dim=5).attack(view, seed=0).info["proportions"]
    assert attacked == pytest.approx({c: round(v, 6) for c, v in found.items()}, abs=1e-6)


def test_pacfl_s_column_count_bounds_the_sets_tried():
    images, labels = _classes()
    mine = torch.isin(labels, torch.tensor([1, 4]))
    view = BasisView(per_class_subspace(images[mine], labels[mine], 5, client_subspace), (1, 8, 8), (0.0,), (1.0,),
                     public=images, public_labels=labels)
    with pytest.raises(privbench.errors.AttackNotApplicableError, match="basis of 10 columns"):
        SubspaceClassSet(form="pacfl", dim=5, max_classes=1).attack(view, seed=0)


def test_the_class_set_figures_and_the_prior():
    uniform = torch.full((10,), 0.1)
    truth = torch.tensor([2, 2, 7, 7, 7])
    out = class_set_scores({2, 7}, truth, uniform)
    # the prior spreads 5 images over the 10 equally frequent classes: one each to classes 0-4
    assert out["label_set_exact"] == 1.0 and out["label_set_jaccard"] == 1.0
    assert out["label_set_exact_chance"] == 0.0 and out["label_set_jaccard_chance"] == pytest.approx(1 / 6)
    assert class_set_scores({2, 3}, truth, uniform)["label_set_jaccard"] == pytest.approx(1 / 3)


@pytest.mark.slow
def test_genefl_s_subspace_gives_away_every_known_client_s_classes(tmp_path):
    result = privbench.run(["attack=class_set", "payload=subspace", "fl.rounds=1", "metrics.lpips=false",
                            "victim.clients=all", "fl.participants=10"], results_dir=tmp_path)
    privacy = result.metrics["privacy"]
    # measured on the 2-core machine, seed 0: each known client's two classes, exactly, 10 of 10 (prior: 0)
    assert privacy["label_set_exact"] == 1.0 and privacy["label_set_exact_chance"] == 0.0
    assert privacy["label_set_jaccard"] > privacy["label_set_jaccard_chance"]
    rows = privacy["victims"]
    assert sorted(r["client"] for r in rows) == list(range(10))
    assert all(r["label_set_exact"] == 1.0 and r["label_set_exact_chance"] == 0.0 for r in rows)
    assert privacy["victims_summary"]["label_set_exact"] == 1.0
    # proportions off by 0.146 in total variation on average (each client holds 50/50), the prior by 0.750
    assert privacy["victims_summary"]["class_proportion_error"] < 0.25 < privacy["victims_summary"][
        "class_proportion_error_chance"]
    assert "class set exact 1.000 on average" in summary(result.metrics)
