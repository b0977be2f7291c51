"""Active servers that adapt (issue 48): partial traps that keep the firing rate honest, trap weights behind an
always-on PCA first layer, and a victim isolated inside secure aggregation by model inconsistency or sybils."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from privbench.attacks.active.isolation import Isolation, quiet, victim_share
from privbench.attacks.active.trap_behind_pca import TrapBehindPCAAttack
from privbench.attacks.active.trap_weights import TrapWeightsAttack, trapped
from privbench.attacks.active.views import ActiveView
from privbench.audit.games.active_cohort import undo_quiet
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.defenses.detector import FIRING, first_firing, inspect_download
from privbench.errors import AttackNotApplicableError, ConfigError
from privbench.models import MLP
from privbench.pixels import normalise

SECURE = ["model=mlp", "fl=fedavg", "payload=aggregate", "aggregation=secagg", "aggregation.max_weight=64",
          "aggregation.clipping_range=32", "aggregation.quantization_range=134217728", "data.num_clients=100",
          "fl.rounds=1", "fl.local_epochs=1", "fl.batch_size=64", "victim.num_images=8", "metrics.lpips=false",
          "attack.fire_rate=0.01"]


def _secure(fl: str) -> list[str]:
    return [f"fl={fl}" if o == "fl=fedavg" else o for o in SECURE]


@pytest.fixture(scope="module")
def fmnist():
    return load_fashion_mnist_subset(train=True), load_fashion_mnist_subset(train=False)


def _craft(fmnist, attack):
    train, test = fmnist
    torch.manual_seed(0)
    model = MLP(in_channels=1, image_size=28, num_classes=10)
    public = normalise(test.images[:1000].float() / 255, train.mean, train.std)
    return model, attack.craft(model, public, seed=0, mean=tuple(train.mean), std=tuple(train.std))


def _check(model, crafted, local):
    state = crafted.state_dict()
    return inspect_download(state, {n: list(t.shape) for n, t in model.state_dict().items()}, model=crafted,
                            local=local)


def _gradient(crafted, x, y):
    params = dict(crafted.named_parameters())
    grads = torch.autograd.grad(F.cross_entropy(crafted(x), y), list(params.values()))
    return dict(zip(params, grads))


def test_partial_traps_keep_the_other_rows_and_pass_the_firing_check(fmnist):
    """Half the rows trapped (1 % of public images each): exactly those rows differ from the download, the first
    ReLU fires on more than the check's 20 % of the client's images (every row trapped: under 5 %, flagged), and
    the read takes only the trapped rows, every input that alone fires one of them back verbatim."""
    train, _ = fmnist
    local = normalise(train.images[:32].float() / 255, train.mean, train.std)
    model, crafted = _craft(fmnist, TrapWeightsAttack(fire_rate=0.01, rows_trapped=0.5))
    changed = (crafted.body[1].weight != model.body[1].weight).any(1).nonzero().flatten()
    assert torch.equal(changed, trapped(200, 0.5)) and len(changed) == 100
    assert not _check(model, crafted, local).flagged and first_firing(crafted, local)[1] > FIRING
    _, full = _craft(fmnist, TrapWeightsAttack(fire_rate=0.01))
    assert _check(model, full, local).flagged and first_firing(full, local)[1] < 0.05
    rows = trapped(200, 0.5)
    with torch.no_grad():
        fires = (local.flatten(1) @ crafted.body[1].weight[rows].T + crafted.body[1].bias[rows]) > 0
    alone = {int(fires[:, r].nonzero()) for r in range(len(rows)) if int(fires[:, r].sum()) == 1}
    grads = _gradient(crafted, local, train.labels[:32])
    attack = TrapWeightsAttack(fire_rate=0.01, rows_trapped=0.5)
    view = ActiveView(crafted.state_dict(), grads, "gradient", None, (1, 28, 28), tuple(train.mean),
                      tuple(train.std), "body.1")
    images = attack.attack(view, seed=0).images.flatten(1)
    back = {i for i in range(32) if (images - local[i].flatten()).norm(dim=1).min() < 1e-3 * local[i].norm()}
    assert len(alone) >= 8 and back == alone


def test_the_pca_first_layer_is_always_on_and_the_download_passes_every_check(fmnist):
    """The first layer fires on every input of the pixel box (black, white, uniform noise, real images), every
    tensor keeps its name and shape, no rows align, every crafted value is within the bound, and the client's three
    checks pass."""
    train, _ = fmnist
    model, crafted = _craft(fmnist, TrapBehindPCAAttack(bound=4.0))
    corners = torch.cat([torch.zeros(1, 1, 28, 28), torch.ones(1, 1, 28, 28),
                         torch.rand(64, 1, 28, 28, generator=torch.Generator().manual_seed(1)),
                         train.images[:200].float() / 255])
    x = normalise(corners, train.mean, train.std)
    with torch.no_grad():
        assert (crafted.body[1](x.flatten(1)) > 0).all()
    assert max(float(crafted.body[i].weight.detach().abs().max()) for i in (1, 3)) <= 4.0 + 1e-6
    assert max(float(crafted.body[i].bias.detach().abs().max()) for i in (1, 3)) <= 4.0 + 1e-6
    assert torch.equal(crafted.fc.weight, model.fc.weight)
    local = normalise(train.images[:32].float() / 255, train.mean, train.std)
    assert not _check(model, crafted, local).flagged and first_firing(crafted, local)[1] == 1.0


def test_a_singly_fired_second_layer_row_reads_the_inputs_projection(fmnist):
    """From a plain-PyTorch gradient of 16 images, each input that alone fires a trapped second-layer row (counted
    from the crafted weights) comes back as its projection on the first layer's row space plus the public mean's
    component outside it, computed here by numpy's least squares."""
    import numpy as np

    train, test = fmnist
    attack = TrapBehindPCAAttack(fire_rate=1 / 16)
    _, crafted = _craft(fmnist, attack)
    x = normalise(train.images[:16].float() / 255, train.mean, train.std)
    with torch.no_grad():
        hidden = crafted.body[2](crafted.body[1](x.flatten(1)))
        fires = (hidden @ crafted.body[3].weight.T + crafted.body[3].bias) > 0
    alone = sorted({int(fires[:, r].nonzero()) for r in range(200) if int(fires[:, r].sum()) == 1})
    view = ActiveView(crafted.state_dict(), _gradient(crafted, x, train.labels[:16]), "gradient", None,
                      (1, 28, 28), tuple(train.mean), tuple(train.std), "body.3")
    images = attack.attack(view, seed=0).images.flatten(1).double()
    w = crafted.body[1].weight.detach().double().numpy()
    public = normalise(test.images[:1000].float() / 255, train.mean, train.std).flatten(1).double().numpy()
    m = public.mean(0)
    projector = w.T @ np.linalg.pinv(w.T)
    assert len(alone) >= 4
    for i in alone:
        expected = projector @ x[i].flatten().double().numpy() + (m - projector @ m)
        assert (images - torch.from_numpy(expected)).norm(dim=1).min() < 1e-3 * np.linalg.norm(expected)


def test_quiet_rows_never_fire_and_never_move_under_local_training(fmnist):
    """The others' download under model inconsistency: the crafted rows zeroed stay exactly zero through 5 steps of
    SGD with momentum and weight decay on real images, while the layer's other rows move."""
    train, _ = fmnist
    model, crafted = _craft(fmnist, TrapWeightsAttack(fire_rate=0.01, rows_trapped=0.5))
    rows = trapped(200, 0.5)
    hushed = quiet(crafted, "body.1", rows)
    before = hushed.body[1].weight.detach().clone()
    optimiser = torch.optim.SGD(hushed.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    x = normalise(train.images[:64].float() / 255, train.mean, train.std)
    for _ in range(5):
        optimiser.zero_grad()
        F.cross_entropy(hushed(x), train.labels[:64]).backward()
        optimiser.step()
    assert (hushed.body[1].weight[rows] == 0).all() and (hushed.body[1].bias[rows] == 0).all()
    others = torch.tensor(sorted(set(range(200)) - set(rows.tolist())))
    assert (hushed.body[1].weight[others] != before[others]).any()


def test_the_server_undoes_its_own_downloads_from_the_sum():
    """A cohort's weighted mean of a layer whose victim (weight 0.3) got crafted rows C (20 of 25) and the others
    those rows zeroed, the other 5 rows alike for all and moved by every member: the victim's share comes back from
    its unfired rows to 1e-12, and the server's view of the crafted rows is the victim's own change, exactly."""
    generator = torch.Generator().manual_seed(0)
    sent = {"l.weight": torch.randn(25, 6, generator=generator, dtype=torch.float64),
            "l.bias": torch.randn(25, generator=generator, dtype=torch.float64)}
    rows = torch.arange(20)
    quiet_sent = {k: v.clone() for k, v in sent.items()}
    for v in quiet_sent.values():
        v[rows] = 0
    change = {k: torch.zeros_like(v) for k, v in sent.items()}
    others = {k: torch.zeros_like(v) for k, v in sent.items()}
    for k, shape in (("l.weight", (3, 6)), ("l.bias", (3,))):
        change[k][[2, 7, 11]] = torch.randn(shape, generator=generator, dtype=torch.float64)
        change[k][20:] = torch.randn((5, *shape[1:]), generator=generator, dtype=torch.float64)
        others[k][20:] = torch.randn((5, *shape[1:]), generator=generator, dtype=torch.float64)
    mean = {k: 0.3 * (sent[k] + change[k]) + 0.7 * (quiet_sent[k] + others[k]) for k in sent}
    stacked = torch.cat([mean["l.weight"], mean["l.bias"][:, None]], 1)
    assert abs(victim_share(stacked, torch.cat([sent["l.weight"], sent["l.bias"][:, None]], 1), rows) - 0.3) < 1e-12
    observed = {k: mean[k] - sent[k] for k in sent}
    assert abs(undo_quiet(observed, mean, sent, quiet_sent, "l", rows) - 0.3) < 1e-12
    for k in sent:
        assert torch.allclose(observed[k][rows], change[k][rows], atol=1e-12)
        assert not torch.allclose(observed[k][20:], change[k][20:])  # the shared rows carry the others' too


def test_the_server_undoes_hushed_quiet_rows_too():
    """The same sum with the others' crafted rows hushed (other weights and biases, not zero; they never move): the
    share comes back from ``mean - quiet = w (sent - quiet)`` on the unfired rows to 1e-12 and the crafted rows read
    the victim's change exactly; the zero-quiet estimate (the quiet rows ignored) misses the share."""
    generator = torch.Generator().manual_seed(1)
    sent = {"l.weight": torch.randn(25, 6, generator=generator, dtype=torch.float64),
            "l.bias": torch.randn(25, generator=generator, dtype=torch.float64)}
    rows = torch.arange(20)
    hushed = {k: v.clone() for k, v in sent.items()}
    hushed["l.weight"][rows] = -sent["l.weight"][rows].abs()
    hushed["l.bias"][rows] = -3.0
    change = {k: torch.zeros_like(v) for k, v in sent.items()}
    for k, shape in (("l.weight", (3, 6)), ("l.bias", (3,))):
        change[k][[2, 7, 11]] = torch.randn(shape, generator=generator, dtype=torch.float64)
    mean = {k: 0.3 * (sent[k] + change[k]) + 0.7 * hushed[k] for k in sent}
    observed = {k: mean[k] - sent[k] for k in sent}
    assert abs(undo_quiet(observed, mean, sent, hushed, "l", rows) - 0.3) < 1e-12
    for k in sent:
        assert torch.allclose(observed[k][rows], change[k][rows], atol=1e-12)
    stacked = torch.cat([mean["l.weight"], mean["l.bias"][:, None]], 1)
    assert abs(victim_share(stacked, torch.cat([sent["l.weight"], sent["l.bias"][:, None]], 1), rows) - 0.3) > 0.05


def test_isolation_settings_are_checked_where_they_enter():
    with pytest.raises(ValueError, match="attack.downloads must be one of same, inconsistent"):
        Isolation("different")
    with pytest.raises(ValueError, match="attack.sybils must be a whole number"):
        Isolation(sybils=-1)
    assert not Isolation().isolates and Isolation(sybils=1).isolates


@pytest.mark.parametrize(("overrides", "message"), [
    (["attack=trap_weights", "attack.sybils=4", *SECURE, "fl.participants=4"],
     r"attack.sybils=4: a cohort of fl.participants=4 has at most 3 members besides the victim"),
    (["attack=trap_weights", "attack.downloads=inconsistent", "model=mlp", "payload=update", "fl=fedavg"],
     r"payload=update is the victim's own message already"),
    (["attack=trap_weights", "attack.downloads=inconsistent", *SECURE, "engine=flower"],
     r"engine=flower sends every client the server's one model"),
    (["attack=trap_weights", "attack.sybils=2", *_secure("genefl"), "fl.participants=8"],
     r"attack.sybils=2: fl=genefl aggregates per cluster"),
    (["attack=trap_behind_pca", "model=mlp", "model.hidden=[200]", "payload=update", "fl=fedavg"],
     r"traps the second fully connected ReLU layer behind the first .* MLP has 1 fully connected ReLU"),
    (["attack=disguised_trap", "model=mlp", "model.hidden=[200]", "payload=update", "fl=fedavg"],
     r"attack=disguised_trap traps the second fully connected ReLU layer behind the first .* MLP has 1"),
    (["attack=disguised_trap", "model=mlp", "model.hidden=[1,200]", "payload=update", "fl=fedavg"],
     r"attack=disguised_trap: the first layer's 1 units hold 0 pairs .* a pair needs 2 units"),
])
def test_an_isolation_or_a_layer_the_model_lacks_is_refused_before_training(tmp_path, overrides, message):
    import privbench

    with pytest.raises((ConfigError, AttackNotApplicableError), match=message):
        privbench.run(overrides, results_dir=tmp_path)
    assert not list(tmp_path.rglob("payloads"))  # nothing trained, nothing recorded


@pytest.mark.slow  # over 1.2 s: the quick suite's 4-minute goal
def test_model_inconsistency_reads_the_victim_through_secure_aggregation(tmp_path):
    """Four members through SecAgg+: the crafted download to the victim only (the others' trapped rows zeroed);
    the server reads the victim's own images from the sum, the victim's share estimated, and counts both
    downloads' bytes (measured 2026-12-05, seed 0)."""
    import privbench

    run = privbench.run(["attack=trap_weights", "attack.downloads=inconsistent", *SECURE, "fl.participants=4"],
                        results_dir=tmp_path)
    privacy, threat = run.metrics["privacy"], json.loads((run.run_dir / "threat_model.json").read_text())
    assert threat["per_client_downloads"] is True and threat["downloads"]["distinct"] == 2
    assert threat["downloads"]["crafted"]["to"] == "client0"
    assert threat["downloads"]["quiet"]["bytes"] == threat["downloads"]["crafted"]["bytes"] == 199_210 * 4
    assert abs(threat["victim_share_estimated"] - 8 / 152) < 0.003  # 8 of the cohort's 8 + 3 x 48 images
    assert privacy["num_true"] == 8 and privacy["recovered_fraction"] >= 0.375
    assert privacy["members_flagging"] == 4 and privacy["download_flagged"] == 1.0  # every row trapped or zeroed


def test_sybils_isolate_the_victim_in_the_secure_sum(tmp_path):
    """Three of four members are the server's sybils (they upload what they received): the secure sum's change is
    the victim's alone, and the server reads its images as from its own update (measured 2026-12-05, seed 0)."""
    import privbench

    run = privbench.run(["attack=trap_weights", "attack.sybils=3", *SECURE, "fl.participants=4"],
                        results_dir=tmp_path)
    privacy, threat = run.metrics["privacy"], json.loads((run.run_dir / "threat_model.json").read_text())
    assert threat["sybil_clients"] == 3 and len(threat["sybils"]) == 3 and "client0" not in threat["sybils"]
    assert privacy["num_true"] == 8 and privacy["recovered_fraction"] >= 0.375


@pytest.mark.slow
def test_the_pca_trap_rides_in_genefls_top_learngene(tmp_path):
    """GENE-FL's paper setting (select=top) on the PCA-trapped download uploads the second layer, the victim's
    check passes, and its images come back (the review's construction; measured 2026-12-05, seed 0)."""
    import privbench

    run = privbench.run(["attack=trap_behind_pca", "model=mlp", "payload=learngene", "fl=genefl",
                         "fl.gene.select=top", "fl.rounds=1", "victim.num_images=8", "fl.local_epochs=1",
                         "metrics.lpips=false"], results_dir=tmp_path)
    threat = json.loads((run.run_dir / "threat_model.json").read_text())
    assert threat["crafted_layer_uploaded"] is True and "body.3" in threat["reply"]
    assert run.metrics["privacy"]["download_flagged"] == 0.0
    assert run.metrics["privacy"]["recovered_fraction"] >= 0.25


@pytest.mark.slow
def test_model_inconsistency_under_genefls_cluster_secure_aggregation(tmp_path):
    """GENE-FL (select=top) through SecAgg+ per cluster, the PCA-trapped download to the victim only: the victim's
    own learnGene carries the trapped layer, its check passes, and the server reads its images from the cluster's
    secure sum (measured 2026-12-05, seed 0)."""
    import privbench

    run = privbench.run(["attack=trap_behind_pca", "attack.downloads=inconsistent", *_secure("genefl"),
                         "fl.gene.select=top", "fl.participants=16"], results_dir=tmp_path)
    privacy, threat = run.metrics["privacy"], json.loads((run.run_dir / "threat_model.json").read_text())
    assert threat["crafted_layer_uploaded"] is True and threat["downloads"]["crafted"]["to"] == "client0"
    assert privacy["download_flagged"] == 0.0 and privacy["num_true"] == 8
    assert privacy["recovered_fraction"] >= 0.25


@pytest.mark.slow  # over 1.2 s: the quick suite's 4-minute goal
def test_an_imprint_block_sent_to_the_victim_only_is_read_through_secure_aggregation(tmp_path):
    """The imprint block (128 bins) to the victim only, the others' bins zeroed: most bins fire for some of the
    victim's images, so its share comes from the few it left unfired (the three closest of the rows' ratios), and
    the server reads the victim's own images from the four members' secure sum (measured 2026-12-05, seed 0)."""
    import privbench

    overrides = [o for o in SECURE if o != "attack.fire_rate=0.01"]
    run = privbench.run(["attack=imprint", "attack.bins=128", "attack.scale=1.0", "attack.downloads=inconsistent",
                         *overrides, "fl.participants=4"], results_dir=tmp_path)
    privacy, threat = run.metrics["privacy"], json.loads((run.run_dir / "threat_model.json").read_text())
    assert abs(threat["victim_share_estimated"] - 8 / 152) < 0.003
    assert "crafted_rows_within_noise" not in threat  # an imprint's bins are not sparse: none dropped
    assert privacy["num_true"] == 8 and privacy["recovered_fraction"] >= 0.5


def test_each_active_attack_states_which_client_checks_its_download_was_built_to_pass() -> None:
    """threat_model.json's client_checks: the imprint block is built to pass none of the three shipped checks, full
    traps the architecture and aligned-row checks only, partial traps the firing rate too, traps behind PCA all
    three; only the disguised trap with few rows also the cautious client's scores (with every row trapped, its
    rare units give it away, and it says so)."""
    from privbench.attacks.active.base import CLIENT_CHECKS
    from privbench.attacks.active.disguised_trap import DisguisedTrapAttack
    from privbench.attacks.active.imprint import ImprintAttack

    def passes(attack) -> set[str]:
        checks = attack.describe()["client_checks"]
        assert set(checks) == set(CLIENT_CHECKS)
        return {c for c, how in checks.items() if how.startswith("designed to pass")}

    assert passes(ImprintAttack()) == set()
    assert passes(TrapWeightsAttack()) == {"architecture", "aligned_rows"}
    shipped = set(CLIENT_CHECKS) - {"cautious_scores"}
    assert passes(TrapWeightsAttack(rows_trapped=0.5)) == shipped
    assert passes(TrapBehindPCAAttack()) == shipped
    assert passes(DisguisedTrapAttack()) == shipped
    assert "rare_units" in DisguisedTrapAttack().designed_against()["cautious_scores"]
    assert passes(DisguisedTrapAttack(fire_rate=0.06, rows_trapped=0.05)) == set(CLIENT_CHECKS)


@pytest.mark.parametrize("attack", [
    ["attack=trap_weights", "attack.downloads=inconsistent"],
    ["attack=loki", "attack.slots=4"],
])
def test_an_agreed_download_digest_stops_per_client_downloads(tmp_path, attack):
    """``aggregation.agreed_download=true``: the members' digests differ, every member abandons the round, and the
    server reads nothing (0 recovered, not missing)."""
    import privbench

    setting = [o for o in SECURE if not o.startswith("attack.")] + (["attack.fire_rate=0.01"] if "trap" in attack[0]
                                                                     else [])
    run = privbench.run([*setting, "fl.participants=4", *attack, "aggregation.agreed_download=true"],
                        results_dir=tmp_path)
    privacy, threat = run.metrics["privacy"], json.loads((run.run_dir / "threat_model.json").read_text())
    assert len(threat["abandoned_by"]) == 4 and privacy["recovered_fraction"] == 0.0
    assert "victim_share_estimated" not in threat  # nothing was aggregated, so nothing was read
    from privbench.audit.summary import summary

    assert "4 members saw another download's digest: round abandoned" in " ".join(summary(run.metrics).split())


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_sybils_hold_the_agreed_digest_and_still_read_the_victim(tmp_path):
    """The attack that knows the digest check: one download for all, three sybils (who say they received it too);
    no member abandons, and the read is the one without the check (seed 0: 0.5 of 8)."""
    import privbench

    overrides = [*SECURE, "fl.participants=4", "attack=trap_weights", "attack.sybils=3"]
    runs = [privbench.run([*overrides, f"aggregation.agreed_download={on}"], results_dir=tmp_path / on)
            for on in ("false", "true")]
    threat = json.loads((runs[1].run_dir / "threat_model.json").read_text())
    assert threat["abandoned_by"] == [] and runs[1].metrics["privacy"]["recovered_fraction"] >= 0.375
    assert runs[1].metrics["privacy"]["recovered_fraction"] == runs[0].metrics["privacy"]["recovered_fraction"]


@pytest.mark.parametrize("attack", ["attack=trap_weights", "attack=none"])
def test_the_agreed_digest_is_refused_on_flower_before_training(tmp_path, attack):
    import privbench

    with pytest.raises(ConfigError, match="aggregation.agreed_download=true: engine=flower runs Flower's"):
        privbench.run([*(o for o in SECURE if attack != "attack=none" or not o.startswith("attack.")), attack,
                       "aggregation.agreed_download=true", "engine=flower"], results_dir=tmp_path)
    assert not list(tmp_path.rglob("payloads"))
