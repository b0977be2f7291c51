"""GENE-FL mechanisms against hand computations, and the protocol end to end on tiny settings."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.linalg import subspace_angles
from torch import nn

from privbench.audit.agnostic import evaluate_agnostic
from privbench.audit.reference import fedavg_reference
from privbench.data import FederatedData
from privbench.data.dataset import ImageDataset
from privbench.errors import ConfigError
from privbench.fl.clustering.subspace import client_subspace, cluster, nearest_cluster, per_class_subspace, proximity
from privbench.fl.fisher import fisher_diagonal
from privbench.fl.genefl.fisher import gene_regulariser
from privbench.fl.genefl.learngene import adapt_gamma, cluster_gene, gene_size, select_by_size, select_layers, xi_scores
from privbench.fl.layers import layers
from privbench.fl.protocols.genefl import GeneFL
from privbench.fl.sgd import accuracy
from privbench.fl.wire import Wire
from privbench.models import LeNet
from privbench.payloads import CapturePolicy, PayloadStore
from privbench.payloads.comm import comm_summary
from privbench.victim import Victim


class _Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 3)

    def forward(self, x):
        return self.fc(x.flatten(1))


def test_fisher_diagonal_matches_hand_computation():
    model = _Linear()
    with torch.no_grad():
        model.fc.weight.copy_(torch.tensor([[0.5, -1.0], [0.2, 0.3], [-0.4, 0.1]]))
        model.fc.bias.copy_(torch.tensor([0.1, 0.0, -0.2]))
    pixels = torch.tensor([[40, 200], [0, 255], [128, 90]], dtype=torch.uint8).view(3, 1, 1, 2)
    y = np.array([0, 2, 1])
    data = ImageDataset("t", pixels, torch.tensor(y), 3, (0.5,), (0.5,))
    # By hand: d log p(y|x)/dW = (onehot(y) - softmax(Wx + b)) x^T, d/db = onehot(y) - softmax.
    w, b = model.fc.weight.detach().double().numpy(), model.fc.bias.detach().double().numpy()
    xq = (pixels.view(3, 2).double().numpy() / 255 - 0.5) / 0.5
    fw, fb = np.zeros_like(w), np.zeros_like(b)
    for xi, yi in zip(xq, y):
        z = w @ xi + b
        p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        r = np.eye(3)[yi] - p
        fw += np.outer(r, xi) ** 2 / len(y)
        fb += r**2 / len(y)
    fisher = fisher_diagonal(model, data, batch_size=2)
    assert np.allclose(fisher["fc.weight"].numpy(), fw, atol=1e-6)
    assert np.allclose(fisher["fc.bias"].numpy(), fb, atol=1e-6)


def test_elastic_gradient_is_zero_below_eps():
    model = _Linear()
    anchor = {n: p.detach() + 0.3 for n, p in model.named_parameters()}
    fisher = {"fc.weight": torch.tensor([[1e-8, 2.0], [0.5, 1e-9], [3.0, 0.0]]), "fc.bias": torch.tensor([1e-7, 1.0, 1e-3])}
    loss = gene_regulariser(model, anchor, fisher, lambda1=0.0, lambda2=2.0, eps=1e-6)
    loss.backward()
    for name, p in model.named_parameters():
        f = fisher[name]
        expected = torch.where(f >= 1e-6, 2 * 2.0 * f * (p.detach() - anchor[name]), torch.zeros_like(f))
        assert torch.allclose(p.grad, expected, atol=1e-6)
        assert (p.grad[f < 1e-6] == 0).all() and (p.grad[f >= 1e-6] != 0).all()


@pytest.mark.parametrize(("lambda1", "lambda2"), [(0.01, 1.0), (0.5, 0.0), (0.0, 2.0)])
def test_the_penalty_gradient_added_directly_gives_the_same_bits_as_backpropagating_it(fmnist, lambda1, lambda2):
    from privbench.fl.genefl.fisher import GeneRegulariser
    from privbench.fl.sgd import local_train

    torch.manual_seed(0)
    start = LeNet(in_channels=1, image_size=28, num_classes=10)
    data = fmnist.client(0)
    anchor = {n: p.detach() + 0.01 * torch.randn_like(p) for n, p in start.named_parameters()}
    reg = GeneRegulariser(anchor=anchor, fisher=fisher_diagonal(start, data), lambda1=lambda1, lambda2=lambda2, eps=1e-6)
    direct = copy.deepcopy(start)
    steps = local_train(direct, data, epochs=1, lr=0.1, batch_size=32, generator=torch.Generator().manual_seed(3),
                        regulariser=reg)
    backprop = copy.deepcopy(start)  # the textbook loop: the penalty is part of the loss
    optimizer = torch.optim.SGD(backprop.parameters(), lr=0.1)
    order, x, y = torch.randperm(len(data), generator=torch.Generator().manual_seed(3)), data.normalised(), data.labels
    for begin in range(0, len(data), 32):
        idx = order[begin:begin + 32]
        optimizer.zero_grad(set_to_none=True)
        (F.cross_entropy(backprop(x[idx]), y[idx]) + reg(backprop)).backward()
        optimizer.step()
    assert steps == -(-len(data) // 32) > 10
    for (name, a), b in zip(direct.named_parameters(), backprop.parameters()):
        assert torch.equal(a, b), name
    assert not torch.equal(direct.fc.weight, start.fc.weight)


def test_smooth_term_is_squared_distance():
    model = _Linear()
    anchor = {n: p.detach() - 0.1 for n, p in model.named_parameters()}
    value = gene_regulariser(model, anchor, {}, lambda1=0.5, lambda2=0.0, eps=0.0)
    assert value.item() == pytest.approx(0.5 * 0.01 * 9, rel=1e-5)  # 9 parameters, each 0.1 away


def test_xi_prefers_the_untouched_layer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    after = {k: v.clone() for k, v in before.items()}
    after["2.weight"] += torch.randn(4, 4)  # perturb layer "2" only
    groups = layers(model)
    for score in ("cos_per_dim", "cos"):
        xi = xi_scores(after, before, groups, score=score)
        assert xi["0"] > xi["2"] and sum(abs(v) for v in xi.values()) == pytest.approx(1.0)
        assert select_layers(xi, 1, select="top") == ["0"] and select_layers(xi, 1, select="bottom") == ["2"]
    norm = xi_scores(after, before, groups, score="update_norm")
    assert norm["0"] == 0.0 and norm["2"] == pytest.approx(1.0)
    assert xi_scores(after, before, groups, score="cos_per_dim")["0"] == pytest.approx(
        (1 / 20) / (1 / 20 + float(F.cosine_similarity(torch.cat([after["2.weight"].flatten(), after["2.bias"]]).double(),
                                                        torch.cat([before["2.weight"].flatten(), before["2.bias"]]).double(),
                                                        dim=0)) / 20))


def test_xi_normalisation_cannot_reverse_a_ranking():
    """A layer whose weights flip sign has cosine -1: the raw scores sum below 0, the ranking must survive."""
    before = {"a": torch.ones(4), "b": torch.ones(4), "c": torch.ones(4)}
    after = {"a": torch.ones(4), "b": torch.tensor([1.0, 1.0, 1.0, -1.0]), "c": -torch.ones(4)}
    groups = {k: [k] for k in before}
    raw = {"a": 1.0, "b": 0.5, "c": -1.0}  # cosines by hand: 4/4, 2/4, -4/4 (sum 0.5 > 0)
    xi = xi_scores(after, before, groups, score="cos")
    assert xi == pytest.approx({k: v / 2.5 for k, v in raw.items()})
    after["a"] = -torch.ones(4)  # now cosines 1 -> -1: raw sum -1.5 < 0, which a plain sum would flip
    xi = xi_scores(after, before, groups, score="cos")
    assert xi == pytest.approx({"a": -1 / 2.5, "b": 0.5 / 2.5, "c": -1 / 2.5})
    assert select_layers(xi, 1, select="top") == ["b"] and select_layers(xi, 1, select="bottom") == ["a"]


def test_layers_group_weight_bias_and_buffers():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2, 1))
    assert layers(model) == {"0": ["0.weight", "0.bias"], "1": ["1.weight", "1.bias", "1.running_mean", "1.running_var"],
                             "3": ["3.weight", "3.bias"]}


def test_gene_size_and_random_selection():
    assert gene_size(0.5, 4) == 2 and gene_size(3, 4) == 3 and gene_size(0.1, 4) == 1
    with pytest.raises(ConfigError):
        gene_size(5, 4)
    scores = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4}
    a = select_layers(scores, 2, select="random", rng=np.random.default_rng(1))
    assert a == select_layers(scores, 2, select="random", rng=np.random.default_rng(1)) and len(a) == 2


def test_cluster_gene_is_the_majority():
    order = ["a", "b", "c", "d"]
    assert cluster_gene([["a", "b"], ["a", "c"], ["a", "b"]], order, 2) == ["a", "b"]
    assert cluster_gene([["a", "b"], ["c", "d"]], order, 2) == ["a", "b"]  # no majority: most uploaded, model order


def _planted() -> FederatedData:
    base = FederatedData.build(source="fashion_mnist_subset", num_clients=6, partition="iid")
    labels = base.train.labels.numpy()
    rng = np.random.default_rng(0)
    groups = [[0, 1], [7, 9]]  # T-shirts/trousers vs sneakers/ankle boots
    clients = []
    for g in (0, 0, 0, 1, 1, 1):
        pool = np.flatnonzero(np.isin(labels, groups[g]))
        clients.append(np.sort(rng.choice(pool, 60, replace=False)))
    base.clients = clients
    return base


def test_clustering_recovers_planted_clusters_and_matches_agnostic():
    data = _planted()
    bases = [client_subspace(data.client(c).normalised(), 5).double().numpy() for c in range(6)]
    labels = cluster(proximity(bases), 2)
    assert labels.tolist() == [0, 0, 0, 1, 1, 1]
    pool = np.flatnonzero(np.isin(data.train.labels.numpy(), [7, 9]))
    newcomer = data.train.subset(torch.from_numpy(pool[-50:]))
    assert nearest_cluster(client_subspace(newcomer.normalised(), 5).double().numpy(), bases, labels) == 1


def test_pacfl_subspaces_recover_planted_per_class_subspaces():
    """Each class lives in its own planted 2-d subspace; clients share classes {0, 1} or {2, 3}."""
    gen = torch.Generator().manual_seed(0)
    planted = torch.linalg.qr(torch.randn(64, 8, generator=gen))[0].reshape(64, 4, 2).permute(1, 0, 2)  # [class, D, 2]

    def client(classes):
        labels = torch.tensor([c for c in classes for _ in range(30)])
        coords = torch.randn(len(labels), 2, generator=gen) * torch.tensor([2.0, 1.0])
        images = torch.einsum("nk,ndk->nd", coords, planted[labels]) + 1e-3 * torch.randn(len(labels), 64, generator=gen)
        return images.reshape(-1, 1, 8, 8), labels

    clients = [client(c) for c in ([0, 1], [0, 1], [2, 3], [2, 3])]
    bases = [per_class_subspace(x, y, 2, client_subspace).double().numpy() for x, y in clients]
    assert bases[0].shape == (64, 4)
    for k in (0, 1):  # the first client's basis holds class k's planted subspace in columns 2k, 2k+1
        assert max(subspace_angles(bases[0][:, 2 * k:2 * k + 2], planted[k].double().numpy())) < 0.01
    pacfl = proximity(bases, variant="pacfl")
    assert pacfl[0, 1] < 0.01 and pacfl[2, 3] < 0.01  # shared classes: smallest principal angle ~0
    assert pacfl[0, 2] == pytest.approx(np.pi / 2, abs=0.01)  # disjoint classes: orthogonal planted subspaces
    assert cluster(pacfl, 2).tolist() == [0, 0, 1, 1]
    assert nearest_cluster(bases[3], bases[:3], np.array([0, 0, 1]), variant="pacfl") == 1


def test_subspace_is_orthonormal_top_singular_vectors():
    x = torch.randn(30, 1, 4, 4)
    u = client_subspace(x, 4)
    assert torch.allclose(u.T @ u, torch.eye(4), atol=1e-5)
    full, _, _ = torch.linalg.svd(x.reshape(30, -1).T.double(), full_matrices=False)
    assert torch.allclose((u.double().T @ full[:, :4]).abs().diag(), torch.ones(4, dtype=torch.float64), atol=1e-5)


def _tiny(tmp_path, *, seed=0, downlink="full", reference=False, gene=None, rounds=2, participants=3, keep="victim",
          **kwargs):
    data = FederatedData.build(source="fashion_mnist_subset", num_clients=6, partition="shard", classes_per_client=2,
                               agnostic_classes=[8, 9], num_agnostic_clients=1, seed=seed)
    torch.manual_seed(seed)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    protocol = GeneFL(rounds=rounds, participants=participants, local_epochs=1, lr=0.1, batch_size=32, num_clusters=3,
                      subspace_dim=3, downlink=downlink, gene=gene or {"gamma": 2},
                      agnostic={"epochs": 1, "fedavg_reference": reference},
                      **kwargs)
    wire = Wire.for_protocol(protocol, PayloadStore(tmp_path / "payloads"),
                             CapturePolicy.build(victim_round=1, victim_client=0, rounds=keep, clients=keep))
    result = protocol.run(model=model, data=data, victim=Victim(client=0, round=1), wire=wire, seed=seed)
    reference_state = None
    if reference:
        reference_state, _ = fedavg_reference(protocol, model=model, data=data, root=tmp_path / "reference", seed=seed)
    agnostic = evaluate_agnostic(result, protocol=protocol, round_=rounds, model=model, data=data, wire=wire, seed=seed,
                                 reference=reference_state)
    return protocol, result, wire, agnostic


LENET_LAYER_BYTES = {"body.0": 312 * 4, "body.2": 3612 * 4, "body.4": 3612 * 4, "fc": 5890 * 4}


@pytest.mark.slow  # over 1.2 s in the quick suite (2026-12-07)
def test_genefl_messages_and_bytes(tmp_path):
    protocol, result, wire, agnostic = _tiny(tmp_path)
    kinds = [r["kind"] for r in wire.store.records()]
    assert kinds.count("subspace") == 6 + 1 and kinds.count("cluster_gene") == 1
    assert kinds.count("cluster_model") == kinds.count("learngene") == 2 * 3
    assert kinds.count("gradient") == kinds.count("gene_gradient") == 1
    for rec in wire.store.records(kind="learngene"):
        chosen = rec["condensation"]["layers"]
        assert len(chosen) == 2 and rec["nbytes"] == sum(LENET_LAYER_BYTES[layer] for layer in chosen)
    for rec in wire.store.records(kind="cluster_model"):
        assert rec["nbytes"] == 53704  # downlink full: the whole model
    for rec in wire.store.records(kind="subspace"):
        assert rec["nbytes"] == 784 * 3 * 4
    gene_grad = wire.store.load("r0001-gene_gradient-client0-server")
    upload = wire.store.load("r0001-learngene-client0-server")
    assert [n for n in gene_grad.names] == [n for n in upload.names]
    assert set(agnostic) >= {"accuracy_learngene", "accuracy_random", "accuracy_cluster_model"}


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_genefl_gene_downlink_sends_less(tmp_path):
    _, _, wire, _ = _tiny(tmp_path, downlink="gene")
    sizes = [r["nbytes"] for r in wire.store.records(kind="cluster_model", round=1)]
    first_timers = [r for r in wire.store.records(kind="cluster_model", round=1)
                    if not list(wire.store.records(kind="learngene", round=0, sender=r["receiver"]))]
    assert len(sizes) == 3 and min(sizes) < 53704
    assert first_timers and all(r["nbytes"] == 53704 for r in first_timers)


@pytest.mark.slow  # 6 s: two GENE-FL trainings
def test_genefl_is_deterministic(tmp_path):
    _, a, wa, agnostic_a = _tiny(tmp_path / "a", seed=3, reference=True)
    _, b, wb, agnostic_b = _tiny(tmp_path / "b", seed=3, reference=True)
    assert comm_summary(wa.store.records()) == comm_summary(wb.store.records())
    assert [h.accuracy for h in a.history] == [h.accuracy for h in b.history]
    assert agnostic_a == agnostic_b and "accuracy_fedavg" in agnostic_a


@pytest.mark.slow
def test_eval_reports_cluster_personal_or_both(tmp_path):
    _, both, _, _ = _tiny(tmp_path / "both", eval="both")
    _, personal, _, _ = _tiny(tmp_path / "personal", eval="personal")
    _, clustered, _, _ = _tiny(tmp_path / "cluster", eval="cluster")
    assert both.accuracy == clustered.accuracy and both.personal_accuracy == personal.accuracy
    assert clustered.personal_accuracy is None and both.personal_client_accuracy == personal.client_accuracy
    # under downlink=full the cluster model's non-gene layers are the cluster average; a client's own model differs
    assert both.personal_accuracy != both.accuracy
    assert [h.personal_accuracy for h in both.history] == [h.accuracy for h in personal.history]


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_pacfl_variant_runs_end_to_end(tmp_path):
    protocol, result, wire, agnostic = _tiny(tmp_path, subspace="pacfl")
    for rec in wire.store.records(kind="subspace", phase="training"):
        assert rec["nbytes"] == 784 * 3 * 2 * 4  # d=3 per class, 2 classes per client (shard)
    assert "accuracy_learngene" in agnostic


@pytest.mark.parametrize("kwargs, message", [
    ({"subspace": "pca"}, "fl.subspace='pca'"),
    ({"eval": "global"}, "fl.eval='global'"),
    ({"downlink": "half"}, "fl.downlink='half'"),
    ({"gene": {"gamma": 0}}, "fl.gene.gamma must be > 0"),
    ({"gene": {"pick": "top"}}, "fl.gene.pick: unknown key"),
    ({"gene": {"select": "middle"}}, "fl.gene.select='middle'"),
    ({"lambda2": -1.0}, "must be >= 0"),
    ({"agnostic": {"epochs": 1, "budget": 3}}, "fl.agnostic.budget: unknown key"),
])
def test_bad_genefl_settings(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        GeneFL(rounds=1, participants=1, local_epochs=1, lr=0.1, batch_size=8, **kwargs)


def _sizes(model: nn.Module) -> dict[str, int]:
    state = model.state_dict()
    return {layer: sum(state[n].numel() for n in names) for layer, names in layers(model).items()}


def test_a_size_budget_of_a_fifth_gives_resnet18_the_papers_learngene():
    """The paper: ResNet-18 is 42.66 MB, its learnGene about 9.04 MB (arXiv 2504.14628, abstract and Tables I-II)."""
    from privbench.models import ResNet18

    sizes = _sizes(ResNet18(in_channels=3, image_size=32, num_classes=10))
    mb = {layer: n * 4 / 2**20 for layer, n in sizes.items()}  # float32, in the paper's MB (MiB)
    assert len(sizes) == 41 and round(sum(mb.values()), 2) == 42.66
    # every cosine after local training is ~1, so xi = cos/dim ranks layers by 1/size: the model alone decides
    scores = {layer: 1.0 / n for layer, n in sizes.items()}
    gene = select_by_size(scores, sizes, 0.2, select="top")
    size = sum(mb[layer] for layer in gene)
    assert abs(size - 9.04) / 9.04 < 0.10
    # by hand: smallest first until a fifth of 11.18M elements is reached, which the 36th smallest layer does
    by_size = sorted(sizes, key=lambda layer: sizes[layer])
    cumulative = np.cumsum([sizes[layer] for layer in by_size])
    crossing = int(np.argmax(cumulative >= 0.2 * cumulative[-1]))
    assert crossing + 1 == 36 and set(gene) == set(by_size[:36])
    # the reading is not a constant fitted to 9.04 MB: every gamma in (0.1562, 0.2088] keeps these 36 layers
    assert all(len(select_by_size(scores, sizes, g)) == 36 for g in (0.157, 0.18, 0.2088))
    assert len(select_by_size(scores, sizes, 0.2090)) == 37  # the next layer adds 2.25 MB
    # the layer-count reading (gamma 0.5 of the layers) keeps the 21 smallest: 0.08 MB
    assert round(sum(mb[layer] for layer in select_layers(scores, gene_size(0.5, 41), select="top")), 2) == 0.08


def test_select_by_size_keeps_the_layer_that_reaches_the_budget():
    scores = {"a": 0.1, "b": 0.4, "c": 0.2, "d": 0.3}
    sizes = {"a": 50, "b": 10, "c": 25, "d": 15}
    assert select_by_size(scores, sizes, 0.10, select="top") == ["b"]            # 10 of 100
    assert select_by_size(scores, sizes, 0.11, select="top") == ["b", "d"]       # 25 >= 11
    assert select_by_size(scores, sizes, 0.30, select="top") == ["b", "c", "d"]  # 10 + 15 + 25
    assert select_by_size(scores, sizes, 0.30, select="bottom") == ["a"]         # 50 alone
    assert select_by_size(scores, sizes, 1.0, select="top") == ["a", "b", "c", "d"]
    with pytest.raises(ConfigError, match="fraction in"):
        select_by_size(scores, sizes, 1.5)


def test_adaptive_gamma_moves_against_the_received_models_accuracy():
    step = {"step": 0.1, "low": 0.2, "high": 0.6}
    assert adapt_gamma(0.4, None, 0.5, **step) == 0.4                  # the first round has nothing to compare
    assert adapt_gamma(0.4, 0.8, 0.7, **step) == 0.5                   # it lost ground: share more
    assert adapt_gamma(0.4, 0.7, 0.8, **step) == 0.3                   # it gained: condense further
    assert adapt_gamma(0.6, 0.8, 0.7, **step) == 0.6 and adapt_gamma(0.2, 0.7, 0.8, **step) == 0.2  # clipped
    assert adapt_gamma(0.4, 0.70, 0.72, **step, tolerance=0.05) == 0.4  # within tolerance: unchanged


@pytest.mark.slow  # a 4-round run; the rule itself is checked by hand in the quick suite
def test_adaptive_gamma_follows_each_clients_signal_in_a_run(tmp_path):
    """Recompute each client's signal from the cluster model the store holds and check its gamma moved by the rule."""
    gene = {"gamma": 0.5, "adaptive": True, "step": 0.25, "gamma_min": 0.25, "gamma_max": 1.0}
    protocol, _, wire, _ = _tiny(tmp_path, gene=gene, rounds=4, participants=6, keep="all")
    data = FederatedData.build(source="fashion_mnist_subset", num_clients=6, partition="shard", classes_per_client=2,
                               agnostic_classes=[8, 9], num_agnostic_clients=1, seed=0)
    scratch = LeNet(in_channels=1, image_size=28, num_classes=10)
    moved = 0
    for c in range(1, 6):  # client 0 is the victim: it trains on its victim batch in round 1
        gamma, previous = 0.5, None
        for r in range(4):
            received = wire.store.load(f"r{r:04d}-cluster_model-server-client{c}")
            scratch.load_state_dict(received.tensors)
            signal = accuracy(scratch, data.client(c))
            if previous is not None and signal != previous:
                gamma = min(max(gamma + (0.25 if signal < previous else -0.25), 0.25), 1.0)
            previous = signal
            up = next(iter(wire.store.records(kind="learngene", round=r, sender=f"client{c}")))
            assert up["condensation"]["gamma"] == pytest.approx(gamma)
            assert len(up["condensation"]["layers"]) == math.ceil(gamma * 4)
            moved += gamma != 0.5
    assert moved  # some gamma moved, so the check above can tell a rule that never moves
    assert "gamma_signal" in [r.what for r in protocol.trainer.reads()]


@pytest.mark.slow
def test_first_full_uploads_seed_every_layer_of_the_cluster_model(tmp_path):
    _, kept, wire_kept, _ = _tiny(tmp_path / "theta0")
    _, seeded, wire, _ = _tiny(tmp_path / "first", unsent="first_full")
    first = {}
    for rec in wire.store.records(kind="learngene"):
        first.setdefault(rec["sender"], rec)
        expected = 53704 if first[rec["sender"]] is rec else sum(LENET_LAYER_BYTES[x] for x in
                                                                    rec["condensation"]["layers"])
        assert rec["nbytes"] == expected
    untouched = lambda result: [n for k, m in result.clustering.models.items() for n, t in m.items()  # noqa: E731
                                if torch.equal(t, result.theta0[n])]
    assert untouched(kept) and not untouched(seeded)


@pytest.mark.parametrize("gene, message", [
    ({"gamma": 2, "budget": "size"}, "must be a fraction in"),
    ({"gamma": 2, "adaptive": True}, "moves a fraction"),
    ({"gamma": 0.5, "adaptive": True, "gamma_min": 0.6}, "gamma_min <= gamma"),
    ({"gamma": 0.5, "budget": "bytes"}, "fl.gene.budget='bytes'"),
])
def test_bad_learngene_budgets(gene, message):
    with pytest.raises(ConfigError, match=message):
        GeneFL(rounds=1, participants=1, local_epochs=1, lr=0.1, batch_size=8, gene=gene)


def test_bad_unsent_rule():
    with pytest.raises(ConfigError, match="fl.unsent='zero'"):
        GeneFL(rounds=1, participants=1, local_epochs=1, lr=0.1, batch_size=8, unsent="zero")
