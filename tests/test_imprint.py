"""The active server's imprint attack (Fowl et al. 2022): the crafted block, the analytic read-out, and audits."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from privbench.attacks.active.imprint import BINS_BIAS, BINS_WEIGHT, craft, expected_fraction, read_bins
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.models import LeNet
from privbench.pixels import normalise


@pytest.fixture(scope="module")
def fmnist():
    return load_fashion_mnist_subset(train=True), load_fashion_mnist_subset(train=False)


def _crafted(fmnist, bins=128):
    train, test = fmnist
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    public = normalise(test.images[:1000].float() / 255, train.mean, train.std)
    return model, craft(model, public, bins=bins, seed=0), public


def _regions(crafted, x):
    """Each input's region between the thresholds, computed from the crafted weights (0: below the lowest)."""
    w, b = crafted.imprint.bins.weight.detach(), crafted.imprint.bins.bias.detach()
    return ((x.flatten(1) @ w.T + b) > 0).sum(1)  # how many thresholds the input is above


def test_the_block_is_equal_bins_at_equal_mass_thresholds_and_barely_changes_the_model(fmnist):
    model, crafted, public = _crafted(fmnist)
    w, b = crafted.imprint.bins.weight.detach(), crafted.imprint.bins.bias.detach()
    assert torch.equal(w, w[:1].expand_as(w)) and bool((b[1:] < b[:-1]).all())  # one direction, rising thresholds
    share_above = ((public.flatten(1) @ w.T + b) > 0).float().mean(0)  # the public share above each threshold
    assert torch.allclose(share_above, 1 - torch.arange(1, 129) / 129, atol=2e-3)
    back = crafted.imprint.back.weight.detach()
    assert torch.equal(back, back[:, :1].expand_as(back))  # every bin goes back along the same vector
    with torch.no_grad():  # the rest of the model sees its input nearly unchanged
        assert (crafted(public[:64]) - model(public[:64])).abs().max() < 1e-2


def test_the_rows_give_back_every_input_alone_in_its_region_exactly(fmnist):
    """A plain-PyTorch gradient of 32 images at the crafted download: the inputs alone between two thresholds come
    back to float precision, and there are as many read-outs as occupied regions (counted from the weights)."""
    train, _ = fmnist
    _, crafted, _ = _crafted(fmnist)
    x = normalise(train.images[:32].float() / 255, train.mean, train.std)
    loss = F.cross_entropy(crafted(x), train.labels[:32])
    names = [n for n, _ in crafted.named_parameters()]
    grads = dict(zip(names, torch.autograd.grad(loss, list(crafted.parameters()))))
    out = read_bins(grads[BINS_WEIGHT], grads[BINS_BIAS])
    regions = _regions(crafted, x)
    occupied = {int(r) for r in regions if r > 0}
    alone = [i for i, r in enumerate(regions.tolist()) if r > 0 and regions.tolist().count(r) == 1]
    assert len(out) == len(occupied) and len(alone) >= 20
    for i in alone:
        assert (out - x[i].flatten()).abs().max(1).values.min() < 1e-3, i


def test_the_share_recovered_from_gradients_follows_the_isolation_law(fmnist):
    """Batches of 64 real images, 128 bins: the share rebuilt (max pixel error < 1e-3) over 10 batches against
    (k/(k+1)) (1 - 1/(k+1))^(B-1) = 0.608, derived independently of the code."""
    train, _ = fmnist
    _, crafted, _ = _crafted(fmnist)
    names = [n for n, _ in crafted.named_parameters()]
    hits = 0
    for start in range(0, 640, 64):
        x = normalise(train.images[start:start + 64].float() / 255, train.mean, train.std)
        loss = F.cross_entropy(crafted(x), train.labels[start:start + 64])
        grads = dict(zip(names, torch.autograd.grad(loss, list(crafted.parameters()))))
        out = read_bins(grads[BINS_WEIGHT], grads[BINS_BIAS])
        hits += sum(int((out - xi.flatten()).abs().max(1).values.min() < 1e-3) for xi in x)
    assert expected_fraction(64, 128) == pytest.approx(0.6077, abs=1e-4)
    assert hits / 640 == pytest.approx(expected_fraction(64, 128), abs=0.06)  # 3 binomial sd of 640 draws


@pytest.mark.slow
def test_an_active_server_takes_a_fedavg_clients_images_verbatim(tmp_path):
    import privbench

    common = ["fl=fedavg", "payload=update", "victim.num_images=16", "metrics.lpips=false", "fl.rounds=2"]
    active = privbench.run([*common, "attack=imprint"], results_dir=tmp_path / "active")
    privacy, threat = active.metrics["privacy"], json.loads((active.run_dir / "threat_model.json").read_text())
    # 2 local epochs of one batch of 16 (2 SGD steps): every image back above 25 dB (49.2 dB mean on 2026-12-01)
    assert privacy["recovered_fraction"] == 1.0 and privacy["recovered_fraction_chance"] == 0.0
    assert threat["server"] == "active" and threat["changed"] == "architecture" and threat["crafted"]["bins"] == 128
    honest = privbench.run([*common, "attack=idlg", "attack.iterations=5", "attack.restarts=1"],
                           results_dir=tmp_path / "honest")
    assert json.loads((honest.run_dir / "threat_model.json").read_text())["server"] == "honest-but-curious"
    noisy = privbench.run([*common, "attack=imprint", "defense=dpsgd"], results_dir=tmp_path / "dp")
    assert noisy.metrics["privacy"]["recovered_fraction"] == 0.0  # the client's own noise drowns the rows


@pytest.mark.slow
def test_a_cautious_client_flags_every_crafted_download_and_no_honest_one(fmnist, tmp_path):
    """The client's check (defenses.detector) on honest downloads: every global model FedAvg and cluster model
    GENE-FL sent in a 4-round run, and fresh LeNet/ConvNet initialisations (seeds 0-4); and on crafted ones (64,
    256, 1,024 bins, seeds 0-4), also when the client accepts the new architecture and only checks the weights."""
    import privbench
    from privbench.attacks.active.imprint import craft
    from privbench.defenses.detector import inspect_download
    from privbench.models import ConvNet
    from privbench.payloads import PayloadStore

    train, test = fmnist
    public = normalise(test.images[:1000].float() / 255, train.mean, train.std)
    honest = []
    for fl in ("fedavg", "genefl"):
        run = privbench.run([f"fl={fl}", "fl.rounds=4", "attack=none", "metrics.lpips=false", "capture.rounds=all",
                             "capture.clients=all"], results_dir=tmp_path / fl)
        store = PayloadStore.open(run.payloads)
        for record in store.records(direction="down", stored=True):
            payload = store.load(record["id"])
            if payload.spec.carries == "model" and payload.tensors is not None and len(payload.tensors) > 4:
                honest.append(dict(payload.tensors))
    for seed in range(5):
        torch.manual_seed(seed)
        for model in (LeNet(in_channels=1, image_size=28, num_classes=10),
                      ConvNet(in_channels=1, image_size=28, num_classes=10)):
            honest.append(model.state_dict())
    assert len(honest) >= 40, len(honest)
    flagged = [inspect_download(s, {n: list(t.shape) for n, t in s.items()}).flagged for s in honest]
    assert not any(flagged)  # false positive rate 0 of len(honest)
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    agreed = {n: list(t.shape) for n, t in model.state_dict().items()}
    for bins in (64, 256, 1024):
        for seed in range(5):
            crafted = craft(model, public, bins=bins, seed=seed).state_dict()
            verdict = inspect_download(crafted, agreed)
            assert verdict.flagged and verdict.reasons[0].startswith("architecture: unexpected imprint")
            accepting = inspect_download(crafted, {n: list(t.shape) for n, t in crafted.items()})
            assert accepting.flagged and any(f"{bins} of {bins} rows" in r for r in accepting.reasons)


@pytest.mark.slow
def test_genefls_own_layer_choice_decides_whether_the_crafted_layer_goes_up(tmp_path):
    """The victim's GENE-FL client code runs on the crafted download (Fisher pass, penalty, xi over the crafted
    model's layers): under the paper's select=top with cos_per_dim a 128-bin block is the largest layer, scores
    lowest and stays home, so nothing is recovered; select=bottom sends it and the victim's image comes back."""
    import privbench

    common = ["attack=imprint", "payload=learngene", "metrics.lpips=false", "fl.rounds=1"]
    top = privbench.run([*common, "fl.gene.select=top"], results_dir=tmp_path / "top")
    threat = json.loads((top.run_dir / "threat_model.json").read_text())
    assert threat["crafted_layer_uploaded"] is False and "imprint.bins" not in threat["reply"]
    assert top.metrics["privacy"]["crafted_layer_uploaded"] == 0.0
    assert top.metrics["privacy"]["recovered_fraction"] == 0.0
    bottom = privbench.run([*common, "fl.gene.select=bottom"], results_dir=tmp_path / "bottom")
    threat = json.loads((bottom.run_dir / "threat_model.json").read_text())
    assert threat["crafted_layer_uploaded"] is True and threat["crafted_layer_xi"] < 0.01
    assert bottom.metrics["privacy"]["recovered_fraction"] == 1.0  # its one image, at the 8-bit ceiling
