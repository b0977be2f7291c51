"""A dataset split among federated clients: what ``data=...`` configs build."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from privbench.data.dataset import ImageDataset
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.data.partition import partition as partition_indices
from privbench.data.partition import split_classes
from privbench.data.torchvision_sets import SPECS, load_torchvision
from privbench.errors import ConfigError
from privbench.schema import Count, IntList, Positive, PositiveInt, Switch

EMBEDDED = ("fashion_mnist_subset",)


def load_split(source: str, *, root: str, train: bool, download: bool) -> ImageDataset:
    """Load one split of ``source`` (embedded or torchvision)."""
    if source == "fashion_mnist_subset":
        return load_fashion_mnist_subset(train=train)
    if source in SPECS:
        return load_torchvision(source, root=root, train=train, download=download)
    raise ConfigError(f"data.source={source!r} is not one of {', '.join(EMBEDDED + tuple(SPECS))}")


@dataclass
class FederatedData:
    """Train/test data and each known client's sample indices.

    Attributes:
        train: the full training split.
        test: test samples of the known classes.
        clients: one index array into ``train`` per known client.
        known_classes: labels the known clients hold.
        agnostic_classes: labels held back for agnostic clients (later joiners).
        agnostic_clients: one index array into ``train`` per agnostic client (agnostic
            classes only, split ``shard``-wise like the known clients; empty without them).
        test_agnostic: test samples of the agnostic classes.
        chance_pool: indices into ``train`` the chance baselines draw their images from, less the attacked ones
            (``victim.photos``: the photograph set); None: the test split.
    """

    train: ImageDataset
    test: ImageDataset
    clients: list[np.ndarray]
    known_classes: list[int]
    agnostic_classes: list[int]
    agnostic_clients: list[np.ndarray]
    test_agnostic: ImageDataset
    chance_pool: np.ndarray | None = None

    @classmethod
    def build(
        cls,
        *,
        source: str,
        root: str = "data",
        download: Switch = False,
        num_clients: PositiveInt = 10,
        partition: str = "shard",
        classes_per_client: PositiveInt = 2,
        alpha: Positive = 0.5,
        min_size: Count = 1,
        agnostic_classes: Annotated[Sequence[int], IntList()] = (),
        num_agnostic_clients: Count = 2,
        seed: int = 0,
    ) -> "FederatedData":
        """Load ``source`` and partition its known classes among ``num_clients`` clients."""
        train = load_split(source, root=root, train=True, download=download)
        test = load_split(source, root=root, train=False, download=download)
        return cls.from_splits(train, test, num_clients=num_clients, partition=partition,
                               classes_per_client=classes_per_client, alpha=alpha, min_size=min_size,
                               agnostic_classes=agnostic_classes, num_agnostic_clients=num_agnostic_clients, seed=seed)

    @classmethod
    def from_splits(
        cls,
        train: ImageDataset,
        test: ImageDataset,
        *,
        num_clients: int = 10,
        partition: str = "shard",
        classes_per_client: int = 2,
        alpha: float = 0.5,
        min_size: int = 1,
        agnostic_classes: Sequence[int] = (),
        num_agnostic_clients: int = 2,
        seed: int = 0,
    ) -> "FederatedData":
        """Partition the known classes of ``train`` among ``num_clients`` clients (see ``build``)."""
        known, agnostic = split_classes(train.num_classes, agnostic_classes)
        pool = np.flatnonzero(np.isin(train.labels.numpy(), known))
        parts = partition_indices(
            train.labels.numpy()[pool],
            scheme=partition,
            num_clients=num_clients,
            classes_per_client=classes_per_client,
            alpha=alpha,
            min_size=min_size,
            seed=seed,
        )
        agnostic_parts: list[np.ndarray] = []
        if agnostic and num_agnostic_clients < 1:
            raise ConfigError(f"data.num_agnostic_clients={num_agnostic_clients}: must be >= 1 when "
                              f"data.agnostic_classes={list(agnostic)} holds classes (or set it to [])")
        if agnostic:
            apool = np.flatnonzero(np.isin(train.labels.numpy(), agnostic))
            scheme = "shard" if partition == "shard" else "iid"
            agnostic_parts = [apool[p] for p in partition_indices(
                train.labels.numpy()[apool], scheme=scheme, num_clients=num_agnostic_clients,
                classes_per_client=min(classes_per_client, len(agnostic)), min_size=min_size, seed=seed + 1)]
        return cls(train, test.with_classes(known), [pool[p] for p in parts], known, agnostic, agnostic_parts,
                   test.with_classes(agnostic))

    def with_client_size(self, client: int, size: int, *, seed: int) -> "FederatedData":
        """The same splits with known client ``client`` holding ``size`` of its images (chosen by ``seed``)."""
        if not 0 <= client < self.num_clients:
            raise ConfigError(f"victim.client={client}: there are {self.num_clients} known clients")
        own = self.clients[client]
        if size > len(own):
            raise ConfigError(f"victim.data_size={size} exceeds client {client}'s {len(own)} images")
        keep = np.sort(np.random.default_rng([seed, 7907]).permutation(len(own))[:size])
        clients = list(self.clients)
        clients[client] = own[keep]
        return dataclasses.replace(self, clients=clients)

    def to(self, device: torch.device | str) -> "FederatedData":
        """The same splits with every image and label on ``device`` (client indices stay NumPy)."""
        return dataclasses.replace(self, train=self.train.to(device), test=self.test.to(device),
                                   test_agnostic=self.test_agnostic.to(device))

    def client_classes(self, i: int, *, agnostic: bool = False) -> list[int]:
        """Labels present in client ``i``'s data (known or agnostic client)."""
        idx = (self.agnostic_clients if agnostic else self.clients)[i]
        return sorted(set(self.train.labels[torch.from_numpy(idx)].tolist()))

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def client(self, i: int, *, agnostic: bool = False) -> ImageDataset:
        """Client ``i``'s private data (an agnostic client's when ``agnostic``)."""
        return self.train.subset(torch.from_numpy((self.agnostic_clients if agnostic else self.clients)[i]))

