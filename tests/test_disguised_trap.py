"""The disguised trap (issue 48 item 3): an active server that knows the cautious client's scores. Its first layer
holds opposed principal directions, its second scaled trap rows; every score but rare units and drift stays in the
download's own range, and with few rows trapped rare units too."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from privbench.attacks.active import disguised_trap
from privbench.attacks.active.disguised_trap import DisguisedTrapAttack
from privbench.attacks.active.trap_weights import read_rows
from privbench.attacks.active.views import ActiveView
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.defenses import detector
from privbench.defenses.detector import download_scores, inspect_download
from privbench.models import MLP
from privbench.pixels import normalise


@pytest.fixture(scope="module")
def setting():
    train, test = load_fashion_mnist_subset(train=True), load_fashion_mnist_subset(train=False)
    public = normalise(test.images[:1000].float() / 255, train.mean, train.std)
    local = normalise(train.images[:64].float() / 255, train.mean, train.std)
    return train, public, local, tuple(train.mean), tuple(train.std)


def _crafted(setting, seed=0, **settings):
    _, public, _, mean, std = setting
    torch.manual_seed(seed)
    model = MLP(in_channels=1, image_size=28, num_classes=10)
    attack = DisguisedTrapAttack(**{"fire_rate": 0.01, **settings})
    return model, attack, attack.craft(model, public, seed=seed, mean=mean, std=std)


def _scores(model, net, local):
    expected = {n: list(t.shape) for n, t in model.state_dict().items()}
    return download_scores(net.state_dict(), expected, model=net, local=local)


def test_the_first_layer_holds_each_principal_direction_twice_opposed(setting):
    """Rows +a u and -a u for the top 100 directions of the public images, computed here by SVD (each up to its
    sign), a the downloaded rows' mean norm; the biases as downloaded."""
    _, public, _, _, _ = setting
    model, attack, crafted = _crafted(setting)
    x = public.flatten(1).double()
    u = torch.linalg.svd(x - x.mean(0), full_matrices=False).Vh[:100]
    a = float(model.body[1].weight.detach().double().norm(dim=1).mean())
    w = crafted.body[1].weight.detach().double()
    pairs = next(iter(attack._pairs.values()))
    assert torch.allclose(w[pairs.plus], -w[pairs.minus])
    cosines = (w[pairs.plus] / a) @ u.T
    assert torch.allclose(cosines.abs(), torch.eye(100, dtype=torch.float64), atol=1e-4)
    assert torch.allclose(w.norm(dim=1), torch.full((200,), a, dtype=torch.float64), rtol=1e-5)
    assert torch.equal(crafted.body[1].bias, model.body[1].bias)


def test_every_score_but_rare_units_stays_in_the_downloads_range_and_the_shipped_check_passes(setting):
    """Against the fresh initialisation it replaces: first-layer firing within 0.01 of one half, the largest bias
    no larger (in units of the initialisation's bound), no dead rows, the same architecture, no aligned rows; the
    hushed quiet download the same, and its trap rows fire on none of 1,000 training images it was not built on."""
    _, public, local, _, _ = setting
    for seed in (0, 1):
        model, attack, crafted = _crafted(setting, seed)
        honest, scores = _scores(model, model, local), _scores(model, crafted, local)
        assert scores["architecture"] == 0.0 and scores["dead_rows"] == 0.0 and scores["aligned"] < 0.999
        assert scores["off_centre"] <= 0.01 and scores["bias_scale"] <= honest["bias_scale"] + 1e-6
        assert not inspect_download(crafted.state_dict(), {n: list(t.shape) for n, t in model.state_dict().items()},
                                    model=crafted, local=local).flagged
        hushed = attack.quiet(crafted)
        quiet = _scores(model, hushed, local)
        assert quiet["architecture"] == 0.0 and quiet["dead_rows"] == 0.0 and quiet["aligned"] < 0.999
        assert quiet["off_centre"] <= 0.01 and quiet["bias_scale"] <= honest["bias_scale"] + 1e-6
        train = setting[0]
        others = normalise(train.images[64:1064].float() / 255, train.mean, train.std)  # images it never saw
        with torch.no_grad():
            fired = hushed.body[3](torch.relu(hushed.body[1](others.flatten(1)))) > 0
        assert int(fired.sum()) == 0  # every row hushed (all of them are trap rows): fires on no input
        assert scores["rare_units"] == 1.0  # every second-layer row fires on about 1 %: this gives it away


def test_few_rows_at_a_higher_rate_keep_rare_units_in_the_honest_range(setting):
    """10 of 200 rows trapped at 6 % of public images: the rare-unit share at most the honest one plus the trapped
    share, and the bar this server designs against is the detector's."""
    assert disguised_trap.RARE == detector.RARE
    _, _, local, _, _ = setting
    model, _, crafted = _crafted(setting, fire_rate=0.06, rows_trapped=0.05)
    honest, scores = _scores(model, model, local), _scores(model, crafted, local)
    assert scores["rare_units"] <= honest["rare_units"] + 0.05 + 1e-9
    assert int((crafted.body[3].weight != model.body[3].weight).any(1).sum()) == 10


def _read(crafted, attack, x, y):
    params = dict(crafted.named_parameters())
    grads = dict(zip(params, torch.autograd.grad(F.cross_entropy(crafted(x), y), list(params.values()))))
    sent = {n: t.detach() for n, t in crafted.state_dict().items()}
    view = ActiveView(sent=sent, observed=grads, reply_kind="gradient", training=None, image_shape=(1, 28, 28),
                      mean=(0.0,), std=(1.0,), crafted_layer="body.3")
    return grads, view


def test_a_singly_fired_trap_row_reads_a_first_layer_output_and_the_pairs_give_its_projection(setting):
    """One step's gradient on 8 images: every read of the second layer is one image's first-layer output to 1e-5
    (relative); from it the pairs give ``u.x`` exactly where a unit of the pair fired and the middle of the window
    where neither fires otherwise (the truth inside it), and the inputs are those coordinates on the directions plus
    the public mean off them, computed here by SVD."""
    train, public, _, _, _ = setting
    _, attack, crafted = _crafted(setting)
    x = normalise(train.images[100:108].float() / 255, train.mean, train.std)
    grads, view = _read(crafted, attack, x, train.labels[100:108].long())
    reads, _ = read_rows(grads["body.3.weight"], grads["body.3.bias"], tolerance=1e-4, same=1e-2)
    with torch.no_grad():
        hidden = torch.relu(crafted.body[1](x.flatten(1))).double()
    assert len(reads) >= 4
    for r in reads:
        i = (hidden - r.double()).norm(dim=1).argmin()
        assert float((hidden[i] - r.double()).norm() / hidden[i].norm()) < 1e-5
    pairs = next(iter(attack._pairs.values()))
    bias = crafted.body[1].bias.detach().double()
    truth, found = x.flatten(1).double() @ pairs.directions.T, pairs.coordinates(hidden, bias)
    fired = torch.maximum(hidden[:, pairs.plus], hidden[:, pairs.minus]) > 0
    assert float(fired.double().mean()) > 0.9 and torch.allclose(found[fired], truth[fired], atol=1e-4)
    low, high = (bias[pairs.minus] / pairs.scale).expand_as(truth), (-bias[pairs.plus] / pairs.scale).expand_as(truth)
    assert bool(((truth >= low - 1e-5) & (truth <= high + 1e-5))[~fired].all())
    assert torch.allclose(found[~fired], ((low + high) / 2)[~fired])
    p = public.flatten(1).double()
    c = p.mean(0)
    u = torch.linalg.svd(p - c, full_matrices=False).Vh[:100]
    sign = torch.sign((pairs.directions * u).sum(1, keepdim=True))  # each direction is found up to its sign
    by_hand = (found * sign.T) @ u + c - (c @ u.T) @ u
    assert torch.allclose(attack.to_inputs(hidden, view), by_hand, atol=1e-4)


def test_the_pairs_read_through_a_secure_sums_rounding(setting):
    """A secure sum's rounding leaves the unit of a pair that did not fire near, not at, 0 (either sign): the
    coordinates still come from the unit that fired, off by at most the bias window; reading the ``+`` unit
    whenever it is positive (this module's first rule) puts them off by about ``u.x`` itself."""
    train, _, _, _, _ = setting
    _, attack, crafted = _crafted(setting)
    pairs = next(iter(attack._pairs.values()))
    x = normalise(train.images[:4].float() / 255, train.mean, train.std).flatten(1)
    with torch.no_grad():
        hidden = torch.relu(crafted.body[1](x)).double()
    noisy = hidden + 1e-3 * torch.randn(hidden.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    truth = x.double() @ pairs.directions.T
    bias = crafted.body[1].bias.detach().double()
    window = float(torch.cat([bias[pairs.plus], bias[pairs.minus]]).abs().max()) / pairs.scale
    assert float((pairs.coordinates(noisy, bias) - truth).abs().max()) < 2 * window + 1e-2
    up, down = noisy[:, pairs.plus], noisy[:, pairs.minus]
    first_rule = torch.where(up > 0, (up - bias[pairs.plus]) / pairs.scale, -(down - bias[pairs.minus]) / pairs.scale)
    assert float((first_rule - truth).abs().max()) > 1.0


def test_a_download_the_server_did_not_craft_is_refused(setting):
    from privbench.errors import AttackNotApplicableError

    train, _, _, _, _ = setting
    model, attack, crafted = _crafted(setting)
    _, view = _read(model, attack, normalise(train.images[:2].float() / 255, train.mean, train.std),
                    train.labels[:2].long())
    with pytest.raises(AttackNotApplicableError, match="did not craft"):
        attack.to_inputs(torch.zeros(1, 200), view)


@pytest.mark.slow  # over 3 s: a secure round of four members
def test_model_inconsistency_with_hushed_rows_reads_the_victim_through_secure_aggregation(tmp_path):
    """Four members through SecAgg+, the victim alone sent the trap rows and the others them hushed (not zero): the
    victim's share comes back from the unfired rows of the difference, and its images are read (seed 0)."""
    import privbench

    run = privbench.run(["attack=disguised_trap", "attack.downloads=inconsistent", "model=mlp", "fl=fedavg",
                         "payload=aggregate", "aggregation=secagg", "aggregation.max_weight=64",
                         "aggregation.clipping_range=32", "aggregation.quantization_range=134217728",
                         "data.num_clients=100", "fl.rounds=1", "fl.local_epochs=1", "fl.batch_size=64",
                         "victim.num_images=8", "metrics.lpips=false", "attack.fire_rate=0.06",
                         "fl.participants=4"], results_dir=tmp_path)
    privacy, threat = run.metrics["privacy"], json.loads((run.run_dir / "threat_model.json").read_text())
    assert abs(threat["victim_share_estimated"] - 8 / 152) < 0.003  # 8 of the cohort's 8 + 3 x 48 images
    assert privacy["download_flagged"] == 0.0 and privacy["members_flagging"] == 0
    assert "the 3 others: its trap rows hushed" in threat["crafted_download"]
    assert privacy["recovered_fraction"] >= 0.375


def test_a_read_that_finds_no_image_recovers_none_and_a_diverged_optimisation_is_missing(tmp_path):
    """An analytic read whose every crafted row was dropped as rounding (status ``empty``) scores 0 recovered, so a
    mean over seeds counts it; an optimisation that diverged leaves the figure missing (it measured nothing)."""
    from privbench.attacks.reconstruction.findings import Reconstruction
    from privbench.audit.games.reconstruction import score_reconstructed
    from privbench.audit.score import Scoring, Truth

    truth = Truth(images=torch.rand(4, 1, 28, 28), labels=torch.arange(4), non_members=torch.rand(8, 1, 28, 28),
                  class_frequencies=torch.full((10,), 0.1), mean=(0.0,), std=(1.0,))
    how = Scoring(seed=0, match_on="mse", use_lpips=False, out=tmp_path)
    empty = DisguisedTrapAttack().nothing("empty")
    diverged = Reconstruction([{"objective": float("nan"), "status": "diverged", "iterations": 10, "evaluations": 10}])
    broken = DisguisedTrapAttack().nothing("non-finite")  # imprint's read that divided by ~0
    assert score_reconstructed(empty, None, DisguisedTrapAttack(), truth, how)["recovered_fraction"] == 0.0
    assert "recovered_fraction" not in score_reconstructed(diverged, None, DisguisedTrapAttack(), truth, how)
    assert "recovered_fraction" not in score_reconstructed(broken, None, DisguisedTrapAttack(), truth, how)


def test_the_read_takes_the_first_layers_biases_as_sent_and_a_layer_without_bias_is_refused(setting):
    """The pairs' biases come from the download the view holds (here moved by 0.01 after crafting), not from the
    server's memory; a second layer whose downloaded biases are all 0 leaves no range to hide the trap rows in."""
    from privbench.errors import AttackNotApplicableError

    train, public, _, mean, std = setting
    _, attack, crafted = _crafted(setting)
    with torch.no_grad():
        crafted.body[1].bias.add_(0.01)
    x = normalise(train.images[:4].float() / 255, train.mean, train.std).flatten(1)
    with torch.no_grad():
        hidden = torch.relu(crafted.body[1](x)).double()
    _, view = _read(crafted, attack, x.view(4, 1, 28, 28), train.labels[:4].long())
    pairs = next(iter(attack._pairs.values()))
    coordinates = (attack.to_inputs(hidden, view).double() - pairs.centre) @ pairs.directions.T
    truth = x.double() @ pairs.directions.T - pairs.centre @ pairs.directions.T
    fired = torch.maximum(hidden[:, pairs.plus], hidden[:, pairs.minus]) > 0
    assert torch.allclose(coordinates[fired], truth[fired], atol=1e-4)
    torch.manual_seed(0)
    model = MLP(in_channels=1, image_size=28, num_classes=10)
    with torch.no_grad():
        model.body[3].bias.zero_()
    with pytest.raises(AttackNotApplicableError, match="every bias there is 0"):
        DisguisedTrapAttack().craft(model, public, seed=0, mean=mean, std=std)
