"""In-memory image dataset: uint8 images, labels and the normalisation they use."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from privbench.pixels import denormalise, normalise

__all__ = ["ImageDataset", "denormalise", "normalise"]


@dataclass(frozen=True)
class ImageDataset:
    """A labelled image set held in memory as uint8 ``[N, C, H, W]``.

    Attributes:
        name: dataset name, e.g. ``"fashion_mnist_subset"``.
        images: uint8 tensor ``[N, C, H, W]``.
        labels: int64 tensor ``[N]``.
        num_classes: number of classes of the full label set.
        mean: per-channel mean used to normalise ``images / 255``.
        std: per-channel standard deviation used likewise.
    """

    name: str
    images: torch.Tensor
    labels: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4:
            raise ValueError("images must be uint8 [N, C, H, W]")
        if len(self.images) != len(self.labels):
            raise ValueError("images and labels differ in length")

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(channels, height, width)`` of one image."""
        return tuple(self.images.shape[1:])  # type: ignore[return-value]

    def normalised(self, index: torch.Tensor | slice | None = None) -> torch.Tensor:
        """Float images ``(x / 255 - mean) / std`` for ``index`` (all when None)."""
        x = self.images if index is None else self.images[index]
        return normalise(x.float() / 255.0, self.mean, self.std)

    def to(self, device: torch.device | str) -> "ImageDataset":
        """The same samples with images and labels on ``device``."""
        return ImageDataset(self.name, self.images.to(device), self.labels.to(device), self.num_classes, self.mean,
                            self.std)

    def with_classes(self, classes: "list[int] | tuple[int, ...]") -> "ImageDataset":
        """The samples whose label is in ``classes``."""
        wanted = torch.tensor(list(classes), dtype=self.labels.dtype, device=self.labels.device)
        return self.subset(torch.isin(self.labels, wanted).nonzero().flatten())

    def subset(self, index: torch.Tensor) -> "ImageDataset":
        """A dataset of the samples at ``index`` with the same normalisation."""
        return ImageDataset(self.name, self.images[index], self.labels[index], self.num_classes, self.mean, self.std)
