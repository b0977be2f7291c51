"""The class set from the sign of the head bias's change (``attacks/property/bias_sign.py``): an absent class's bias
only falls under SGD with cross-entropy, so the classes whose bias did not fall are a subset of the true set."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from privbench.attacks.labels.views import LabelView
from privbench.attacks.property.bias_sign import BiasSignClassSet
from privbench.attacks.target import AttackTarget
from privbench.errors import AttackNotApplicableError


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(12, 16), nn.ReLU())
        self.fc = nn.Linear(16, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))


def _update(classes: list[int], counts: list[int], seed: int, *, momentum: float, steps: int = 40
            ) -> tuple[nn.Module, torch.Tensor]:
    """A model and the head bias's pseudo-gradient -(change) / (lr * steps) after ``steps`` SGD steps (batch 8) on
    records of ``classes`` (``counts`` of each)."""
    torch.manual_seed(seed)
    net = Small()
    start = {k: v.clone() for k, v in net.state_dict().items()}
    y = torch.cat([torch.full((k,), c) for c, k in zip(classes, counts)])
    centres = 2 * torch.randn(6, 12, generator=torch.Generator().manual_seed(99))
    x = torch.randn(len(y), 12) + centres[y]
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=momentum)
    for _ in range(steps):
        rows = torch.randperm(len(y))[:8]
        opt.zero_grad()
        F.cross_entropy(net(x[rows]), y[rows]).backward()
        opt.step()
    change = net.state_dict()["fc.bias"] - start["fc.bias"]
    net.load_state_dict(start)
    return net, -change / (0.05 * steps)


def _read(net: nn.Module, pseudo: torch.Tensor) -> list[int]:
    target = AttackTarget(net, {"fc.bias": pseudo}, 8, (12,), 6)
    return BiasSignClassSet().attack(LabelView(target, torch.zeros(1, 12), torch.zeros(1)), seed=0).value


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_no_absent_class_is_ever_named_and_a_client_of_two_classes_is_named_exactly(momentum):
    """Over 20 random clients of 1 to 4 of 6 classes, the set found never holds a class the client lacks; for the
    clients of two equal classes (each half the data, far above any prediction of it) it is the set itself."""
    gen = torch.Generator().manual_seed(0)
    exact_pairs = 0
    for seed in range(20):
        k = 1 + seed % 4
        classes = sorted(torch.randperm(6, generator=gen)[:k].tolist())
        net, pseudo = _update(classes, [24] * k, seed, momentum=momentum)
        found = _read(net, pseudo)
        assert set(found) <= set(classes), (classes, found)
        exact_pairs += int(k == 2 and found == classes)
    assert exact_pairs == 5  # every two-class client (seeds 1, 5, 9, 13, 17)


def test_when_no_bias_rose_the_least_fallen_is_named_and_unchanged_biases_prove_nothing():
    net = Small()
    fell = torch.tensor([3.0, 1.0, 2.0, 5.0, 4.0, 6.0])
    got = BiasSignClassSet().attack(LabelView(AttackTarget(net, {"fc.bias": fell}, 8, (12,), 6), torch.zeros(1, 12),
                                              torch.zeros(1)), seed=0)
    assert got.value == [1] and got.info["bias_rose"] is False
    pruned = torch.tensor([0.0, -1.0, 0.0, 0.0, 2.0, 0.0])  # a sparsified upload: most changes zeroed
    got = BiasSignClassSet().attack(LabelView(AttackTarget(net, {"fc.bias": pruned}, 8, (12,), 6), torch.zeros(1, 12),
                                              torch.zeros(1)), seed=0)
    assert got.value == [1]


def test_the_proof_is_said_to_fail_where_the_declared_training_breaks_it():
    from privbench.attacks.property.bias_sign import proof

    plain = {"lr": 0.1, "steps": 8, "batch_size": 32, "num_samples": 240, "epochs": 1, "momentum": 0.9}
    assert proof({"payload_kind": "update", "training": plain}).startswith("holds")
    assert proof({"payload_kind": "gradient", "training": None}).startswith("holds")
    assert "DP-SGD" in proof({"payload_kind": "update", "training": {**plain, "clip": 1.0}})
    assert "penalty (fisher)" in proof({"payload_kind": "learngene", "training": {**plain, "fisher": 0.5}})
    assert "aggregate" in proof({"payload_kind": "cluster_model", "training": plain})


def test_a_message_without_the_head_bias_is_refused():
    net = Small()
    with pytest.raises(AttackNotApplicableError, match="does not carry the classifier head's bias"):
        BiasSignClassSet().attack(LabelView(AttackTarget(net, {"fc.weight": torch.zeros(6, 16)}, 8, (12,), 6),
                                            torch.zeros(1, 12), torch.zeros(1)), seed=0)
