"""What every federated protocol shares: settings, participant sampling, the round loop result."""
from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.data import FederatedData, ImageDataset
from privbench.errors import ConfigError
from privbench.fl.local import batch_gradient, client_accuracy, local_train
from privbench.fl.victim import Victim
from privbench.fl.wire import Wire
from privbench.payloads import Payload


@dataclass
class FLResult:
    """Outcome of a federated run.

    Attributes:
        model: the final global model (for clustered protocols, the victim's cluster model).
        accuracy: known-client accuracy: each known client's model on the test images of
            its own classes, averaged over those images.
        history: one dict per round (accuracy, bytes so far).
        extra: protocol-specific results (clusters, agnostic clients, reference runs).
    """

    model: nn.Module
    accuracy: float
    history: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


class FederatedProtocol(ABC):
    """A federated protocol with rounds of sampled participants and local SGD.

    Args:
        rounds: number of communication rounds.
        participants: clients sampled per round (without replacement).
        local_epochs: local epochs per round.
        lr: local SGD learning rate.
        batch_size: local batch size.
        momentum: local SGD momentum.
    """

    name = "protocol"
    #: payload kinds this protocol sends.
    emits: tuple[str, ...] = ()

    def __init__(self, *, rounds: int, participants: int, local_epochs: int, lr: float, batch_size: int, momentum: float = 0.0) -> None:
        for key, value, low in (("rounds", rounds, 1), ("participants", participants, 1), ("local_epochs", local_epochs, 1), ("batch_size", batch_size, 1)):
            if value < low:
                raise ConfigError(f"fl.{key} must be >= {low}, got {value}")
        if lr <= 0:
            raise ConfigError(f"fl.lr must be > 0, got {lr}")
        if not 0 <= momentum < 1:
            raise ConfigError(f"fl.momentum must be in [0, 1), got {momentum}")
        self.rounds, self.participants, self.local_epochs = rounds, participants, local_epochs
        self.lr, self.batch_size, self.momentum = lr, batch_size, momentum
        self.private = None  # a DP trainer (defenses.dpsgd.DPSGD) when defense=dpsgd

    def local_update(self, model: nn.Module, data: ImageDataset, *, client: int, round_: int, seed: int,
                     regulariser: Callable[[nn.Module], torch.Tensor] | None = None) -> int:
        """Client ``client``'s local training this round (DP-SGD when a DP trainer is set); returns steps."""
        generator = self.client_seed(seed, round_, client)
        if self.private is not None:
            return self.private.train(model, data, client=f"client{client}", epochs=self.local_epochs, lr=self.lr,
                                      batch_size=self.batch_size, momentum=self.momentum, generator=generator,
                                      max_steps=self.max_steps(len(data)), regulariser=regulariser)
        return local_train(model, data, epochs=self.local_epochs, lr=self.lr, batch_size=self.batch_size,
                           momentum=self.momentum, generator=generator, regulariser=regulariser)

    def max_steps(self, num_samples: int) -> int:
        """Steps a client with ``num_samples`` takes if it joins every round (a DP accounting bound)."""
        return self.rounds * self.local_epochs * -(-num_samples // self.batch_size)

    def check(self, *, data: FederatedData, victim: Victim) -> None:
        """Fail before training if the settings cannot run on ``data`` with ``victim``."""
        if self.participants > data.num_clients:
            raise ConfigError(f"fl.participants={self.participants} exceeds data.num_clients={data.num_clients}")
        if not 0 <= victim.client < data.num_clients:
            raise ConfigError(f"victim.client={victim.client} must be in 0..{data.num_clients - 1}")
        if not 0 <= victim.round < self.rounds:
            raise ConfigError(f"victim.round={victim.round} must be in 0..{self.rounds - 1} (fl.rounds={self.rounds})")
        victim.batch_positions(len(data.clients[victim.client]), seed=0)

    def sample(self, round_: int, num_clients: int, *, seed: int, victim: Victim) -> list[int]:
        """Participants of ``round_``: a seeded draw; the victim is swapped in on its round."""
        chosen = list(np.random.default_rng([seed, round_]).choice(num_clients, self.participants, replace=False))
        if round_ == victim.round and victim.client not in chosen:
            chosen[-1] = victim.client
        return sorted(int(c) for c in chosen)

    def hparams(self) -> dict[str, Any]:
        """Local hyper-parameters sent with each upload's metadata."""
        return {"lr": self.lr, "epochs": self.local_epochs, "batch_size": self.batch_size, "momentum": self.momentum}

    def victim_gradient(self, local: nn.Module, client_data: ImageDataset, truth: np.ndarray, c: int, r: int,
                        victim: Victim, wire: Wire, base_id: str,
                        seed: int) -> tuple[dict[str, torch.Tensor], ImageDataset, np.ndarray]:
        """Send the victim's one-step gradient on its victim batch at the received model.

        Returns the gradient and the data (and its train-set indices) the victim trains on
        this round: the victim batch when ``victim.update_data == "batch"``, else all of it.
        """
        name = f"client{c}"
        pos = victim.batch_positions(len(client_data), seed=seed)
        batch = torch.from_numpy(pos)
        x, y = client_data.normalised(batch), client_data.labels[batch]
        if self.private is not None:
            gen = torch.Generator().manual_seed(seed * 7 + 1)
            grad = self.private.gradient(local, x, y, client=name, num_samples=len(client_data), generator=gen,
                                         max_steps=self.max_steps(len(client_data)))
        else:
            grad = batch_gradient(local, x, y)
        wire.send(Payload.from_tensors(kind="gradient", round=r, sender=name, receiver="server", tensors=grad,
                                       base=base_id, hparams={"batch_size": len(pos), "local_steps": 1},
                                       truth=truth[pos].tolist()))
        if victim.update_data == "batch":
            return grad, client_data.subset(batch), truth[pos]
        return grad, client_data, truth

    @staticmethod
    def known_accuracy(model: nn.Module, data: FederatedData, state_of: Callable[[int], dict[str, torch.Tensor]]) -> float:
        """Accuracy over known clients, each scored with ``state_of(client)`` on its own classes."""
        correct = total = 0.0
        for c in range(data.num_clients):
            model.load_state_dict(state_of(c))
            acc, n = client_accuracy(model, data.test, data.client_classes(c))
            correct, total = correct + acc * n, total + n
        return correct / max(total, 1)

    @staticmethod
    def client_seed(seed: int, round_: int, client: int) -> torch.Generator:
        """Generator for a client's batch order in a round, fixed by ``(seed, round, client)``."""
        return torch.Generator().manual_seed(int(np.random.SeedSequence([seed, round_, client]).generate_state(1)[0]))

    @staticmethod
    def progress(iterable, *, desc: str):
        """Progress bar on a terminal, silent otherwise."""
        from tqdm.auto import tqdm

        return tqdm(iterable, desc=desc, disable=not sys.stderr.isatty(), leave=False)

    @abstractmethod
    def run(self, *, model: nn.Module, data: FederatedData, victim: Victim, wire: Wire, seed: int) -> FLResult:
        """Train ``model`` federatedly, sending every message through ``wire``."""
