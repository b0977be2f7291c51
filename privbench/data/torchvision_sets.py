"""Datasets read through torchvision (or Debian's Fashion-MNIST package) into memory."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from privbench.data.dataset import ImageDataset
from privbench.data.idx import read_idx
from privbench.errors import DatasetNotFoundError

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


@dataclass(frozen=True)
class _Spec:
    cls: str
    classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    files: str


SPECS = {
    "fashion_mnist": _Spec("FashionMNIST", 10, (0.2860,), (0.3530,), "ROOT/FashionMNIST/raw/*-ubyte"),
    "mnist": _Spec("MNIST", 10, (0.1307,), (0.3081,), "ROOT/MNIST/raw/*-ubyte"),
    "cifar10": _Spec("CIFAR10", 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), "ROOT/cifar-10-batches-py/"),
    "cifar100": _Spec("CIFAR100", 100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), "ROOT/cifar-100-python/"),
    "svhn": _Spec("SVHN", 10, (0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970), "ROOT/train_32x32.mat, ROOT/test_32x32.mat"),
}


def _from_debian(train: bool) -> ImageDataset | None:
    prefix = "train" if train else "t10k"
    images = DEBIAN_FASHION_MNIST / f"{prefix}-images-idx3-ubyte.gz"
    labels = DEBIAN_FASHION_MNIST / f"{prefix}-labels-idx1-ubyte.gz"
    if not (images.exists() and labels.exists()):
        return None
    spec = SPECS["fashion_mnist"]
    x = torch.from_numpy(read_idx(images).copy()).unsqueeze(1)
    y = torch.from_numpy(read_idx(labels).astype(np.int64))
    return ImageDataset("fashion_mnist", x, y, spec.classes, spec.mean, spec.std)


def _to_nchw(data: object) -> torch.Tensor:
    array = data.numpy() if isinstance(data, torch.Tensor) else np.asarray(data)
    if array.ndim == 3:  # N, H, W (MNIST family)
        array = array[:, None]
    elif array.shape[-1] in (1, 3):  # N, H, W, C (CIFAR)
        array = array.transpose(0, 3, 1, 2)
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.uint8))


def load_torchvision(name: str, *, root: str, train: bool = True, download: bool = False) -> ImageDataset:
    """Load ``name`` into memory from ``root`` (downloading only when asked).

    Fashion-MNIST is also read from Debian's ``dataset-fashion-mnist`` package when present.

    Raises:
        DatasetNotFoundError: the files are not under ``root``; the message says how to get them.
    """
    if name not in SPECS:
        raise DatasetNotFoundError(f"unknown torchvision dataset '{name}'; allowed: {', '.join(SPECS)}")
    spec = SPECS[name]
    if name == "fashion_mnist" and not download and not (Path(root) / "FashionMNIST" / "raw").exists():
        debian = _from_debian(train)
        if debian is not None:
            return debian
    import torchvision.datasets as tvd

    split = {"split": "train" if train else "test"} if name == "svhn" else {"train": train}
    try:
        ds = getattr(tvd, spec.cls)(root=root, download=download, **split)
    except Exception as exc:  # torchvision raises RuntimeError, URLError, OSError, ...
        how = (
            f"run with data.download=true (needs internet), or put the files at {spec.files.replace('ROOT', root)}"
        )
        if name == "fashion_mnist":
            how += " , or `apt-get install -y dataset-fashion-mnist` (read from /usr/share/datasets/fashion-mnist)"
        raise DatasetNotFoundError(f"dataset '{name}' not found under data.root={root} ({type(exc).__name__}); {how}") from exc
    labels = torch.as_tensor(np.asarray(ds.labels if name == "svhn" else ds.targets), dtype=torch.int64)
    return ImageDataset(name, _to_nchw(ds.data), labels, spec.classes, spec.mean, spec.std)
