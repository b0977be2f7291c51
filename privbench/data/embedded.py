"""The Fashion-MNIST subset shipped inside the package (no network needed)."""
from __future__ import annotations

import hashlib
import io
from importlib import resources

import numpy as np
import torch

from privbench.data.dataset import ImageDataset

ASSET = "fashion_mnist_subset.npz"
SHA256 = "6c4b8e30c77dd0c44bb44da892e90041ed0480aa9bc4b2e97cf8711171515ab4"
# Per-channel statistics of the full Fashion-MNIST training set.
MEAN, STD = (0.2860,), (0.3530,)


def load_fashion_mnist_subset(*, train: bool = True) -> ImageDataset:
    """Load the embedded stratified subset (6,000 train / 1,000 test, 28x28 grey).

    The file's sha256 is checked before it is read.

    Example:
        >>> ds = load_fashion_mnist_subset(train=False)
        >>> len(ds), ds.shape
        (1000, (1, 28, 28))
    """
    raw = resources.files("privbench.data").joinpath("assets", ASSET).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SHA256:
        raise RuntimeError(f"embedded dataset {ASSET} is corrupt: sha256 {digest}, expected {SHA256}")
    split = "train" if train else "test"
    with np.load(io.BytesIO(raw)) as arrays:
        images = torch.from_numpy(arrays[f"{split}_images"].copy()).unsqueeze(1)
        labels = torch.from_numpy(arrays[f"{split}_labels"].astype(np.int64))
    return ImageDataset("fashion_mnist_subset", images, labels, 10, MEAN, STD)
