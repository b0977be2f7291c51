"""Embedded data, idx reading, partitions and the known/agnostic split."""
from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from privbench.data import FederatedData, denormalise, normalise, partition, split_classes
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.data.idx import read_idx
from privbench.data.torchvision_sets import load_torchvision
from privbench.errors import ConfigError, DatasetNotFoundError


def test_embedded_subset_is_stratified_uint8():
    train, test = load_fashion_mnist_subset(train=True), load_fashion_mnist_subset(train=False)
    assert train.images.dtype == torch.uint8 and train.images.shape == (6000, 1, 28, 28)
    assert test.images.shape == (1000, 1, 28, 28)
    assert torch.bincount(train.labels).tolist() == [600] * 10
    assert torch.bincount(test.labels).tolist() == [100] * 10
    assert 0.2 < train.images.float().mean().item() / 255 < 0.4  # Fashion-MNIST's mean is 0.286


def test_embedded_checksum_is_enforced(monkeypatch):
    monkeypatch.setattr("privbench.data.embedded.SHA256", "0" * 64)
    with pytest.raises(RuntimeError, match="corrupt"):
        load_fashion_mnist_subset()


def test_read_idx_roundtrip(tmp_path):
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    header = bytes([0, 0, 0x08, 3]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    (tmp_path / "a.gz").write_bytes(gzip.compress(header + array.tobytes()))
    assert np.array_equal(read_idx(tmp_path / "a.gz"), array)


def test_normalise_roundtrip():
    x = torch.rand(2, 3, 4, 4)
    mean, std = (0.1, 0.2, 0.3), (0.5, 0.6, 0.7)
    assert torch.allclose(denormalise(normalise(x, mean, std), mean, std), x, atol=1e-6)


def _labels(n_per_class=100, classes=10):
    return np.repeat(np.arange(classes), n_per_class)


def test_iid_partition_covers_disjointly_and_is_deterministic():
    labels = _labels()
    parts = partition(labels, scheme="iid", num_clients=7, seed=3)
    merged = np.concatenate(parts)
    assert len(merged) == len(labels) == len(np.unique(merged))
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1
    again = partition(labels, scheme="iid", num_clients=7, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    other = partition(labels, scheme="iid", num_clients=7, seed=4)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other))


@pytest.mark.parametrize("s", [1, 2, 3])
def test_shard_partition_gives_s_classes_each(s):
    labels = _labels()
    parts = partition(labels, scheme="shard", num_clients=10, classes_per_client=s, seed=0)
    assert all(len(np.unique(labels[p])) == s for p in parts)
    merged = np.concatenate(parts)
    assert len(merged) == len(np.unique(merged)) == len(labels)


def test_dirichlet_partition_respects_min_size_and_skews():
    labels = _labels(200)
    parts = partition(labels, scheme="dirichlet", num_clients=5, alpha=0.1, min_size=20, seed=1)
    assert min(len(p) for p in parts) >= 20
    merged = np.concatenate(parts)
    assert len(merged) == len(np.unique(merged)) == len(labels)
    dominant = [np.bincount(labels[p], minlength=10).max() / len(p) for p in parts]
    assert np.mean(dominant) > 0.3  # alpha=0.1 concentrates clients on few classes


@pytest.mark.parametrize("kwargs, message", [
    ({"scheme": "shard", "num_clients": 10, "classes_per_client": 11}, "classes_per_client=11"),
    ({"scheme": "shard", "num_clients": 2, "classes_per_client": 2}, "some class has no client"),
    ({"scheme": "iid", "num_clients": 10, "min_size": 101}, "min_size=101"),
    ({"scheme": "dirichlet", "num_clients": 10, "alpha": -1.0}, "alpha must be > 0"),
    ({"scheme": "dirichlet", "num_clients": 10, "alpha": 0.01, "min_size": 99, "max_tries": 5}, "no draw"),
    ({"scheme": "stripes", "num_clients": 2}, "is not one of iid, shard, dirichlet"),
])
def test_impossible_partitions_fail_clearly(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        partition(_labels(), **kwargs)


def test_split_classes_and_known_clients_only_hold_known():
    assert split_classes(10, [9, 8]) == ([0, 1, 2, 3, 4, 5, 6, 7], [8, 9])
    with pytest.raises(ConfigError):
        split_classes(10, [10])
    data = FederatedData.build(source="fashion_mnist_subset", num_clients=4, partition="shard",
                               classes_per_client=2, agnostic_classes=[8, 9])
    held = set(np.concatenate([data.train.labels.numpy()[c] for c in data.clients]).tolist())
    assert held == set(range(8))
    assert set(data.test.labels.tolist()) == set(range(8)) and len(data.test) == 800


def test_missing_torchvision_dataset_says_how_to_get_it(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="data.download=true"):
        load_torchvision("cifar10", root=str(tmp_path))


def test_an_offline_download_says_there_is_no_network_and_where_the_files_go(tmp_path, monkeypatch):
    import urllib.error

    import torchvision.datasets as tvd

    def offline(**kwargs):
        raise RuntimeError("Error downloading cifar-10-python.tar.gz") from urllib.error.URLError("[Errno -3]")

    monkeypatch.setattr(tvd, "CIFAR10", offline)
    with pytest.raises(DatasetNotFoundError) as exc:
        load_torchvision("cifar10", root=str(tmp_path), download=True)
    message = str(exc.value)
    assert "could not reach the network" in message and "cifar-10-batches-py" in message
    assert "data.download=false" in message and "run with data.download=true" not in message
    assert "URLError" not in message and "RuntimeError" not in message


def test_a_missing_dataset_names_no_internal_exception(tmp_path):
    with pytest.raises(DatasetNotFoundError) as exc:
        load_torchvision("cifar10", root=str(tmp_path))
    assert "RuntimeError" not in str(exc.value) and "data.download=true (needs internet)" in str(exc.value)
