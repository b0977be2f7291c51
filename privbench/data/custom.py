"""Bring your own data: any map-style dataset of ``(image, label)`` pairs, split among clients."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from privbench.data.dataset import ImageDataset
from privbench.data.federated import FederatedData
from privbench.errors import ConfigError


def _image(x: Any) -> torch.Tensor:
    """One image as uint8 ``[C, H, W]``: a PIL image, a uint8 array or tensor, or floats in [0, 1]."""
    if not isinstance(x, (torch.Tensor, np.ndarray)):
        x = np.asarray(x)  # PIL images and nested lists
        if x.ndim == 3:
            x = x.transpose(2, 0, 1)  # PIL gives [H, W, C]
    t = torch.as_tensor(np.asarray(x) if isinstance(x, np.ndarray) else x)
    if t.ndim == 2:
        t = t[None]
    if t.ndim != 3:
        raise ConfigError(f"data: an image has shape {tuple(t.shape)}; expected [C, H, W] or [H, W]")
    if t.dtype == torch.uint8:
        return t
    if t.is_floating_point():
        if t.min() < 0 or t.max() > 1:
            raise ConfigError("data: float images must be in [0, 1] (do not normalise them; privbench does)")
        return (t * 255).round().to(torch.uint8)
    raise ConfigError(f"data: images of dtype {t.dtype} are not supported; give uint8 or floats in [0, 1]")


def image_dataset(dataset: Any, *, name: str, num_classes: int | None = None,
                  mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> ImageDataset:
    """Read every ``(image, label)`` of a map-style dataset into memory.

    ``mean``/``std`` default to the per-channel statistics of this split; ``num_classes`` to
    the largest label plus one.

    Example:
        >>> pairs = [(torch.rand(1, 8, 8), i % 3) for i in range(6)]
        >>> image_dataset(pairs, name="toy").images.shape, image_dataset(pairs, name="toy").num_classes
        (torch.Size([6, 1, 8, 8]), 3)
    """
    if len(dataset) == 0:
        raise ConfigError(f"data: the {name} dataset is empty")
    images, labels = zip(*((_image(dataset[i][0]), int(dataset[i][1])) for i in range(len(dataset))))
    x = torch.stack(images)
    y = torch.tensor(labels, dtype=torch.long)
    classes = num_classes if num_classes is not None else int(y.max()) + 1
    if int(y.min()) < 0 or int(y.max()) >= classes:
        raise ConfigError(f"data: labels must be in [0, {classes}); the {name} dataset has {int(y.min())}..{int(y.max())}")
    f = x.float() / 255.0
    m = tuple(float(v) for v in (mean if mean is not None else f.mean(dim=(0, 2, 3))))
    s = tuple(float(v) for v in (std if std is not None else f.std(dim=(0, 2, 3)).clamp_min(1e-3)))
    return ImageDataset(name, x, y, classes, m, s)


def from_datasets(*, train: Any, test: Any, name: str = "custom", num_classes: int | None = None,
                  num_clients: int = 10, partition: str = "shard", classes_per_client: int = 2, alpha: float = 0.5,
                  min_size: int = 1, agnostic_classes: Sequence[int] = (), num_agnostic_clients: int = 2,
                  seed: int = 0) -> FederatedData:
    """``FederatedData`` from two map-style datasets of ``(image, label)``; the target of a custom ``data`` config.

    The test split is normalised with the training split's statistics. Partition arguments
    are those of ``FederatedData.build``.
    """
    train_set = image_dataset(train, name=name, num_classes=num_classes)
    test_set = image_dataset(test, name=name, num_classes=train_set.num_classes, mean=train_set.mean,
                             std=train_set.std)
    if test_set.shape != train_set.shape:
        raise ConfigError(f"data: train images are {train_set.shape} but test images {test_set.shape}")
    return FederatedData.from_splits(train_set, test_set, num_clients=num_clients, partition=partition,
                                     classes_per_client=classes_per_client, alpha=alpha, min_size=min_size,
                                     agnostic_classes=agnostic_classes, num_agnostic_clients=num_agnostic_clients,
                                     seed=seed)
