"""LOKI's per-client kernels (issue 48 item 2): each member's download differs only in its convolution slot, a
member's images fire only its own slot's bins, and the read of a secure sum returns exactly the images alone in
their region, each attributed to its member; a server that gives every member the same slot is caught by the
attribution figure."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from privbench.attacks.active.loki import BINS_BIAS, BINS_WEIGHT, LokiAttack
from privbench.attacks.active.views import ActiveView
from privbench.audit.games.active import score_attributed
from privbench.audit.score import Scoring, Truth
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.errors import AttackNotApplicableError, ConfigError
from privbench.models.lenet import LeNet
from privbench.pixels import normalise

BINS, MEMBERS, IMAGES = 16, 4, 6


@pytest.fixture(scope="module")
def crafted():
    train, test = load_fashion_mnist_subset(train=True), load_fashion_mnist_subset(train=False)
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    public = normalise(test.images[:1000].float() / 255, train.mean, train.std)
    attack = LokiAttack(slots=MEMBERS + 1, bins=BINS)
    victim = attack.craft(model, public, seed=0, mean=tuple(train.mean), std=tuple(train.std))
    raw = test.images[:1000].double().flatten(1).mean(1) / 255  # the thresholds, computed again by hand
    cuts = np.quantile(raw.numpy(), np.arange(1, BINS + 1) / (BINS + 1))
    return train, attack, victim, cuts


def _batch(train, member: int, images: int = IMAGES) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    idx = torch.arange(member * images, (member + 1) * images) * 7
    return train.normalised(idx), train.labels[idx], train.images[idx].float() / 255


def test_each_member_s_download_differs_in_its_kernels_only_and_fires_only_its_slot(crafted):
    train, attack, victim, cuts = crafted
    downloads = attack.member_downloads(victim, MEMBERS)
    states = [d.state_dict() for d in downloads]
    differ = {n for n in states[0] if any(not torch.equal(s[n], states[0][n]) for s in states[1:])}
    assert differ == {"loki.conv.weight", "loki.conv.bias"}
    assert torch.equal(states[0]["loki.conv.weight"], victim.state_dict()["loki.conv.weight"])  # the victim: slot 0
    for member, download in enumerate(downloads):
        x, _, pixels = _batch(train, member)
        block = download.loki
        h = torch.relu(block.conv(x)).view(len(x), block.slots, -1)
        assert torch.allclose(h[:, member], pixels.flatten(1), atol=1e-5)  # the slot holds the raw pixels
        fired = (block.bins(h) > 0).view(len(x), block.slots, BINS)
        assert not fired[:, [s for s in range(block.slots) if s != member]].any()
        by_hand = torch.from_numpy(pixels.double().flatten(1).mean(1).numpy()[:, None] > cuts[None, :])
        assert torch.equal(fired[:, member], by_hand)


def _sum_of_changes(train, attack, victim, *, same_slot: bool = False, images: int = IMAGES, rounding: float = 0.0
                    ) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """One SGD step (lr 0.1) of each member on its download, averaged with unequal weights as a secure sum does,
    plus uniform noise of +/- ``rounding`` on every entry (the sum's rounding)."""
    downloads = attack.member_downloads(victim, MEMBERS)
    if same_slot:  # a broken server: every member gets the victim's slot
        downloads = [attack.member_downloads(victim, MEMBERS)[0] for _ in range(MEMBERS)]
    weights, change, truth = [0.1, 0.2, 0.3, 0.4], {}, []
    for member, download in enumerate(downloads):
        x, y, pixels = _batch(train, member, images)
        params = dict(download.named_parameters())
        grads = torch.autograd.grad(F.cross_entropy(download(x), y), [params[BINS_WEIGHT], params[BINS_BIAS]])
        for name, grad in zip((BINS_WEIGHT, BINS_BIAS), grads):
            change[name] = change.get(name, 0) - 0.1 * weights[member] * grad
        truth.append(pixels)
    generator = torch.Generator().manual_seed(1)
    for name, tensor in change.items():
        change[name] = tensor + rounding * (2 * torch.rand(tensor.shape, generator=generator) - 1)
    return change, truth


def _view(train, victim, change, images: int = IMAGES) -> ActiveView:
    names = [f"client{m}" for m in range(MEMBERS)]
    return ActiveView(victim.state_dict(), change, "update", None, (1, 28, 28), tuple(train.mean), tuple(train.std),
                      "loki.bins", {"downloads": {"slots": {n: m for m, n in enumerate(names)}, "victim": "client2"}},
                      target=list(range(MEMBERS * images)), owners=[n for n in names for _ in range(images)])


@pytest.mark.parametrize("same_slot", [False, True])
def test_the_read_of_a_secure_sum_returns_the_isolated_images_each_attributed_to_its_member(crafted, tmp_path,
                                                                                             same_slot):
    train, attack, victim, cuts = crafted
    change, truth = _sum_of_changes(train, attack, victim, same_slot=same_slot)
    names = [f"client{m}" for m in range(MEMBERS)]
    view = _view(train, victim, change)
    finding = attack.attack(view, seed=0)
    images = torch.cat(truth)
    scored = score_attributed(finding, view, attack, Truth(
        images=images, labels=torch.zeros(len(images), dtype=torch.long), non_members=images[:4] * 0.5,
        class_frequencies=torch.full((10,), 0.1), mean=tuple(train.mean), std=tuple(train.std)),
        Scoring(seed=0, match_on="mse", use_lpips=False, out=tmp_path))
    if same_slot:  # the members' images share one slot's bins: fewer are alone, and each is attributed to client0
        assert scored["misattributed"] > 0 and scored["attributed_fraction"] < scored["recovered_fraction"]
        return
    regions = [np.searchsorted(cuts, p.double().flatten(1).mean(1).numpy()) for p in truth]  # by hand
    occupied = [len({int(r) for r in region if r > 0}) for region in regions]  # one read each (alone or mixed)
    assert [finding.sources.count(n) for n in names] == occupied
    alone = sum(int(r > 0 and (region == r).sum() == 1) for region in regions for r in region)
    mixed = sum(occupied) - alone  # a mixture read may still be one image's, where the other's gradient is small
    assert alone / len(images) <= scored["recovered_fraction"] <= (alone + mixed) / len(images)
    assert scored["attributed_fraction"] == scored["recovered_fraction"] and scored["misattributed"] == 0
    assert alone == 15 and mixed == 4  # seed 0's batches, by hand
    victim = [row for row in scored["matched"] if row["truth"] // IMAGES == 2 and row["psnr"] >= 20]
    assert scored["victim_attributed_fraction"] == len(victim) / IMAGES


@pytest.mark.parametrize("images", [IMAGES, 12])  # 12 images fill most of a slot's 17 regions
def test_the_sentinel_slot_measures_the_rounding_so_empty_regions_are_dropped(crafted, images):
    """Rounding of +/- 2e-7 on every entry of the sum (the smallest real step is 5.6e-6 here): without the floor
    every region of every slot is read; with it (6 robust sigmas of the sentinel's steps) exactly the occupied ones,
    however full the slots are."""
    train, attack, victim, cuts = crafted
    change, truth = _sum_of_changes(train, attack, victim, images=images, rounding=2e-7)
    regions = [np.searchsorted(cuts, p.double().flatten(1).mean(1).numpy()) for p in truth]
    occupied = [len({int(r) for r in region if r > 0}) for region in regions]
    assert sum(occupied) > MEMBERS * BINS / 2 if images == 12 else True
    read = attack.attack(_view(train, victim, change, images), seed=0)
    assert [read.sources.count(f"client{m}") for m in range(MEMBERS)] == occupied
    blind = LokiAttack(slots=MEMBERS + 1, bins=BINS, noise=0.0, tolerance=1e-12).attack(_view(train, victim, change, images), seed=0)
    assert len(blind.sources) == MEMBERS * BINS


def test_other_slots_never_move_under_several_local_steps(crafted):
    """Four SGD steps with momentum on member 1's images: every other slot's kernels and bins stay bit-identical."""
    train, attack, victim, _ = crafted
    download = attack.member_downloads(victim, MEMBERS)[1]
    sent = {n: t.clone() for n, t in download.state_dict().items()}
    optimiser = torch.optim.SGD(download.parameters(), lr=0.1, momentum=0.9)
    x, y, _ = _batch(train, 1)
    for step in range(4):
        optimiser.zero_grad()
        F.cross_entropy(download(x[step % 2::2]), y[step % 2::2]).backward()
        optimiser.step()
    state, others = download.state_dict(), [s for s in range(MEMBERS + 2) if s != 1]
    rows = torch.cat([torch.arange(s * BINS, (s + 1) * BINS) for s in others])
    assert torch.equal(state[BINS_WEIGHT][rows], sent[BINS_WEIGHT][rows])
    assert torch.equal(state[BINS_BIAS][rows], sent[BINS_BIAS][rows])
    assert torch.equal(state["loki.conv.weight"][others[1:]], sent["loki.conv.weight"][others[1:]])
    assert not torch.equal(state[BINS_BIAS][BINS:2 * BINS], sent[BINS_BIAS][BINS:2 * BINS])  # its own moved


def test_loki_s_settings_are_checked_where_they_enter(crafted):
    _, attack, victim, _ = crafted
    with pytest.raises(ValueError, match="attack.slots and attack.bins must be >= 1"):
        LokiAttack(slots=0)
    with pytest.raises(AttackNotApplicableError, match="attack.slots=5: the cohort has 6 members"):
        attack.member_downloads(victim, 6)


@pytest.mark.parametrize(("overrides", "message"), [
    (["attack.slots=3", "fl.participants=4"], r"attack.slots=3: a cohort of fl.participants=4 needs a slot for each"),
    (["engine=flower"], r"engine=flower sends every client the server's one model"),
    (["attack=imprint", "attack.downloads=per_client"], r"attack=imprint has no per-client downloads"),
])
def test_a_cohort_larger_than_the_slots_or_an_engine_of_one_model_is_refused_before_training(tmp_path, overrides,
                                                                                               message):
    import privbench

    with pytest.raises(ConfigError, match=message):
        privbench.run(["attack=loki", "fl=fedavg", "model=lenet", "payload=aggregate", "aggregation=secagg",
                       *overrides], results_dir=tmp_path)  # a later attack= replaces the first
    assert not list(tmp_path.rglob("payloads"))


@pytest.mark.slow
def test_loki_reads_a_twenty_member_cohort_through_secagg(tmp_path):
    """20 members of 8 images, one local step each, through SecAgg+ at 2^27 levels (LeNet, seed 0, measured
    2026-12-05: 0.88 of the 160 images recovered, every one from its own member's slot)."""
    import privbench

    run = privbench.run(["attack=loki", "fl=fedavg", "model=lenet", "payload=aggregate", "aggregation=secagg",
                         "aggregation.max_weight=64", "aggregation.clipping_range=32",
                         "aggregation.quantization_range=134217728", "data.num_clients=600", "data.partition=iid",
                         "data.min_size=8", "fl.participants=20", "fl.rounds=1", "fl.local_epochs=1",
                         "fl.batch_size=8", "victim.num_images=8", "metrics.lpips=false"], results_dir=tmp_path)
    privacy, threat = run.metrics["privacy"], json.loads((run.run_dir / "threat_model.json").read_text())
    assert privacy["num_true"] == 160 and privacy["attributed_fraction"] >= 0.8
    assert privacy["misattributed"] == 0 and privacy["members_flagging"] == 20
    assert privacy["victim_attributed_fraction"] >= 0.5  # client0's 8 images
    downloads = threat["downloads"]
    assert downloads["distinct"] == 20 and downloads["differ_in"] == ["loki.conv.bias", "loki.conv.weight"]
    assert downloads["bytes_total"] == 20 * downloads["each"]["bytes"]
