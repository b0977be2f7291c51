"""The victim: which client, round and private images the audit targets."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import numpy as np

from privbench.errors import ConfigError
from privbench.schema import Count, Number, PositiveInt

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
        clients: more clients audited in the same round: ``None`` (only ``client``), a list of
            client indices (each is sampled into the round), or ``"all"`` (every participant
            of the round). Each sends its own audit gradient and is attacked on its own;
            ``client`` stays the headline victim.
        photos: ``None``, or a set of real photographs (a name in ``privbench.data.photos.PHOTOS``, checked when
            the data loads) that replaces the victim client's data, its labels numbered after the data's classes;
            every other client's images are brought to the photographs' shape.
        data_size: how many of its images the victim client keeps (a seeded subset of its partition; every
            other client's data unchanged); None: all of them.
    """

    client: Count = 0
    round: Annotated[int, Number(integer=True, low=-1)] = 0
    num_images: PositiveInt = 1
    update_data: str = "batch"
    clients: Sequence[int] | str | None = None
    data_size: Annotated[int | None, Number(integer=True, low=1, nullable=True)] = None
    photos: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.clients, str) and self.clients != "all":
            raise ConfigError(f"victim.clients={self.clients!r}: allowed null, all or a list of client indices")
        if self.clients is not None and not isinstance(self.clients, str):
            clients = list(self.clients)
            if any(isinstance(c, bool) or not isinstance(c, int) for c in clients):
                raise ConfigError(f"victim.clients={clients}: allowed null, all or a list of client indices")
            object.__setattr__(self, "clients", tuple(sorted(set(clients))))
        if self.num_images < 1:
            raise ConfigError(f"victim.num_images must be >= 1, got {self.num_images}")
        if self.data_size is not None and self.data_size < self.num_images:
            raise ConfigError(f"victim.data_size={self.data_size} is smaller than victim.num_images={self.num_images}")
        if self.update_data not in UPDATE_DATA:
            raise ConfigError(f"victim.update_data={self.update_data!r} is not one of {', '.join(UPDATE_DATA)}")

    @property
    def name(self) -> str:
        return f"client{self.client}"

    @property
    def listed(self) -> tuple[int, ...]:
        """Every client named as a victim: ``client`` first, then ``clients`` when they are a list."""
        extra = () if self.clients is None or isinstance(self.clients, str) else self.clients
        return (self.client, *[c for c in extra if c != self.client])

    def audits(self, client: int) -> bool:
        """Whether ``client``'s messages are audited when it takes part in the victim round."""
        return self.clients == "all" or client in self.listed

    def alone(self, client: int) -> "Victim":
        """The same victim settings for ``client`` alone (how each audited client's payload is selected)."""
        return Victim(client=client, round=self.round, num_images=self.num_images, update_data=self.update_data)

    def batch_positions(self, num_samples: int, *, seed: int) -> np.ndarray:
        """Positions (within the victim's local data) of the victim batch, fixed by ``seed``."""
        if self.num_images > num_samples:
            raise ConfigError(f"victim.num_images={self.num_images} exceeds client {self.client}'s {num_samples} samples")
        return np.sort(np.random.default_rng([seed, 7919]).permutation(num_samples)[: self.num_images])

    def check_fits(self, *, client_sizes: Sequence[int], participants: int, rounds: int) -> None:
        """Refuse (``ConfigError``, one line) a victim the run cannot audit: a client, listed client or round
        outside the run, more listed clients than a round's participants, or a batch a client cannot fill
        (``client_sizes``: each known client's number of images)."""
        num_clients = len(client_sizes)
        if not 0 <= self.client < num_clients:
            raise ConfigError(f"victim.client={self.client} must be in 0..{num_clients - 1}")
        outside = [c for c in self.listed if not 0 <= c < num_clients]
        if outside:
            raise ConfigError(f"victim.clients: {outside[0]} is not one of 0..{num_clients - 1}")
        if len(self.listed) > participants:
            raise ConfigError(f"victim.clients names {len(self.listed)} clients (victim.client included) but only "
                              f"fl.participants={participants} take part in a round")
        for c in self.listed[1:]:
            self.alone(c).batch_positions(client_sizes[c], seed=0)
        if not 0 <= self.round < rounds:
            raise ConfigError(f"victim.round={self.round} must be in 0..{rounds - 1} (fl.rounds={rounds})")
        self.batch_positions(client_sizes[self.client], seed=0)
