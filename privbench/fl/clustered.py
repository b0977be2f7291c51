"""Clustered protocols (GENE-FL, cluster-FedAvg): one-shot subspace clustering, per-cluster rounds."""
from __future__ import annotations

import copy
from abc import abstractmethod
from collections import defaultdict
from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.data import FederatedData
from privbench.errors import ConfigError
from privbench.fl.aggregate import aggregate
from privbench.fl.local import parameters_of
from privbench.fl.protocol import FederatedProtocol, FLResult
from privbench.fl.settings import AgnosticSettings, settings
from privbench.fl.subspace import client_subspace, cluster, proximity
from privbench.fl.victim import Victim
from privbench.fl.wire import Wire
from privbench.payloads import Payload


class ClusteredProtocol(FederatedProtocol):
    """Known clients send their data subspace once, are clustered, then train per cluster.

    Args:
        num_clusters: ``K``, clusters of the hierarchical clustering.
        subspace_dim: ``d``, left singular vectors each client sends.
        agnostic: settings of the agnostic-client evaluation (``AgnosticSettings``).
        **kwargs: the shared settings of ``FederatedProtocol``.
    """

    def __init__(self, *, num_clusters: int = 2, subspace_dim: int = 5, agnostic: dict | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_clusters, self.subspace_dim = num_clusters, subspace_dim
        self.agnostic = settings(AgnosticSettings, agnostic, key="fl.agnostic")

    def check(self, *, data: FederatedData, victim: Victim) -> None:
        super().check(data=data, victim=victim)
        if not 1 <= self.num_clusters <= data.num_clients:
            raise ConfigError(f"fl.num_clusters={self.num_clusters} must be in 1..{data.num_clients} (data.num_clients)")
        smallest = min(len(c) for c in data.clients)
        if not 1 <= self.subspace_dim <= smallest:
            raise ConfigError(f"fl.subspace_dim={self.subspace_dim} must be in 1..{smallest} (the smallest client's samples)")

    def cluster_clients(self, data: FederatedData, wire: Wire) -> tuple[np.ndarray, list[np.ndarray]]:
        """Every known client sends ``U_i`` (``subspace``); the server clusters the subspaces."""
        bases = []
        for c in range(data.num_clients):
            u = client_subspace(data.client(c).normalised(), self.subspace_dim)
            wire.send(Payload.from_tensors(kind="subspace", round=0, sender=f"client{c}", receiver="server",
                                           tensors={"U": u}, truth=data.clients[c].tolist()))
            bases.append(u.double().numpy())
        return cluster(proximity(bases), self.num_clusters), bases

    def run(self, *, model: nn.Module, data: FederatedData, victim: Victim, wire: Wire, seed: int) -> FLResult:
        theta0 = parameters_of(model)
        labels, bases = self.cluster_clients(data, wire)
        clusters = {int(k): {n: t.clone() for n, t in theta0.items()} for k in set(labels.tolist())}
        self.personal: dict[int, dict[str, torch.Tensor]] = {}
        self.genes: dict[int, list[str]] = {}
        history = []
        for r in self.progress(range(self.rounds), desc="rounds"):
            uploads: dict[int, list] = defaultdict(list)
            for c in self.sample(r, data.num_clients, seed=seed, victim=victim):
                k = int(labels[c])
                received = self.downlink(model, clusters[k], c, k, r, wire)
                uploads[k].append(self.client_round(model, received, data, c, k, r, victim, wire, seed))
            for k, ups in uploads.items():
                clusters[k] = aggregate(clusters[k], [(n, tensors) for n, tensors, _ in ups])
                self.after_aggregation(k, [layer_list for _, _, layer_list in ups])
            wire.store.flush()
            acc = self.known_accuracy(model, data, lambda c: self.client_state(clusters[int(labels[c])], c))
            history.append({"round": r, "accuracy": acc, **wire.totals()})
        extra: dict[str, Any] = {"clusters": labels.tolist()}
        if data.agnostic_clients:
            from privbench.fl.agnostic import evaluate_agnostic

            extra["agnostic"] = evaluate_agnostic(self, model=model, data=data, theta0=theta0, clusters=clusters,
                                                  labels=labels, bases=bases, wire=wire, seed=seed)
            wire.store.flush()
        model.load_state_dict(clusters[int(labels[victim.client])])
        return FLResult(model=model, accuracy=history[-1]["accuracy"], history=history, extra=extra)

    def downlink(self, model: nn.Module, cluster_state: dict[str, torch.Tensor], c: int, k: int, r: int, wire: Wire) -> dict[str, torch.Tensor]:
        """Send the cluster model to client ``c``; return the state the client starts from."""
        wire.send(Payload.from_tensors(kind="cluster_model", round=r, sender="server", receiver=f"client{c}",
                                       tensors=cluster_state, cluster=k))
        return {n: t.clone() for n, t in cluster_state.items()}

    def client_state(self, cluster_state: dict[str, torch.Tensor], c: int) -> dict[str, torch.Tensor]:
        """The model client ``c`` uses for inference (the cluster model unless overridden)."""
        return cluster_state

    def after_aggregation(self, k: int, uploaded_layers: list[list[str]]) -> None:
        """Hook after cluster ``k`` aggregated a round's uploads."""

    @staticmethod
    def fresh(model: nn.Module, state: dict[str, torch.Tensor]) -> nn.Module:
        """A copy of ``model`` holding ``state``."""
        local = copy.deepcopy(model)
        local.load_state_dict(state)
        return local

    @abstractmethod
    def client_round(self, model: nn.Module, received: dict[str, torch.Tensor], data: FederatedData, c: int, k: int,
                     r: int, victim: Victim, wire: Wire, seed: int) -> tuple[int, dict[str, torch.Tensor], list[str]]:
        """Local training of client ``c``; returns (sample count, uploaded tensors, uploaded layers)."""
