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


def _offline(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a failed network connection."""
    import socket
    import urllib.error

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (urllib.error.URLError, socket.gaierror, socket.timeout, ConnectionError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _not_loaded(name: str, root: str, download: bool, exc: BaseException) -> DatasetNotFoundError:
    """One line for a dataset torchvision could not give: offline, not there, or unreadable."""
    files = f"put the files at {SPECS[name].files.replace('ROOT', root)}"
    if name == "fashion_mnist":
        files += ", or `apt-get install -y dataset-fashion-mnist` (read from /usr/share/datasets/fashion-mnist)"
    if download and _offline(exc):
        return DatasetNotFoundError(f"dataset '{name}': data.download=true could not reach the network from this "
                                    f"machine; {files} and run with data.download=false")
    text = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
    if not download and ("not found" in text.lower() or "download=true" in text or isinstance(exc, FileNotFoundError)):
        return DatasetNotFoundError(f"dataset '{name}' not found under data.root={root}; run with data.download=true "
                                    f"(needs internet), or {files}")
    return DatasetNotFoundError(f"dataset '{name}' under data.root={root} could not be read ({text or 'no reason given'}); "
                                f"{files}")


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
        raise _not_loaded(name, root, download, exc) from None
    labels = torch.as_tensor(np.asarray(ds.labels if name == "svhn" else ds.targets), dtype=torch.int64)
    return ImageDataset(name, _to_nchw(ds.data), labels, spec.classes, spec.mean, spec.std)
