"""The victim: which client, round and private images the audit targets."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privbench.errors import ConfigError

UPDATE_DATA = ("batch", "all")


@dataclass(frozen=True)
class Victim:
    """The audited client.

    Attributes:
        client: index of the victim among the known clients.
        round: round in which the victim's messages are attacked.
        num_images: size of the victim batch (the images the attack tries to rebuild).
        update_data: what the victim trains on in the victim round: ``batch`` (only the
            victim batch, so an ``update`` payload is a function of those images) or
            ``all`` (its whole local data, the realistic and much harder case).
    """

    client: int = 0
    round: int = 0
    num_images: int = 1
    update_data: str = "batch"

    def __post_init__(self) -> None:
        if self.num_images < 1:
            raise ConfigError(f"victim.num_images must be >= 1, got {self.num_images}")
        if self.update_data not in UPDATE_DATA:
            raise ConfigError(f"victim.update_data={self.update_data!r} is not one of {', '.join(UPDATE_DATA)}")

    @property
    def name(self) -> str:
        return f"client{self.client}"

    def batch_positions(self, num_samples: int, *, seed: int) -> np.ndarray:
        """Positions (within the victim's local data) of the victim batch, fixed by ``seed``."""
        if self.num_images > num_samples:
            raise ConfigError(f"victim.num_images={self.num_images} exceeds client {self.client}'s {num_samples} samples")
        return np.sort(np.random.default_rng([seed, 7919]).permutation(num_samples)[: self.num_images])
