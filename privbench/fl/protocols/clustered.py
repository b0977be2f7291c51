"""Clustered protocols (GENE-FL, cluster-FedAvg): one-shot subspace clustering, per-cluster rounds."""
from __future__ import annotations

import copy
from abc import abstractmethod
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch import nn

from privbench.data import FederatedData
from privbench.errors import ConfigError
from privbench.fl.aggregate import aggregate
from privbench.fl.genefl.learngene import layers, state_names
from privbench.fl.genefl.settings import AgnosticSettings
from privbench.fl.genefl.subspace import client_subspace, cluster, proximity
from privbench.fl.protocols.base import ClientRound, Clustering, FederatedProtocol, ProtocolResult, RoundRecord
from privbench.fl.settings import settings
from privbench.fl.sgd import State, parameters_of
from privbench.fl.wire import Wire
from privbench.payloads import Payload
from privbench.victim import Victim


@dataclass
class ClusterRun:
    """The state of one run of a clustered protocol; made by ``run()``, never kept on the protocol.

    Attributes:
        layers: the model's layers and their state names.
        labels: each known client's cluster.
        models: each cluster's current model.
        genes: each cluster's learnGene layers so far.
        personal: each client's own model after its latest round.
        gene_count: layers in a learnGene (GENE-FL).
    """

    layers: dict[str, list[str]]
    labels: np.ndarray
    models: dict[int, State]
    genes: dict[int, list[str]] = field(default_factory=dict)
    personal: dict[int, State] = field(default_factory=dict)
    gene_count: int = 0

    def gene_names(self, k: int) -> list[str]:
        """State names of cluster ``k``'s learnGene so far."""
        return state_names(self.layers, self.genes.get(k, []))


@dataclass(frozen=True)
class Upload:
    """What a client's round returns to the server loop."""

    num_samples: int
    tensors: State
    layers: list[str]


class ClusteredProtocol(FederatedProtocol):
    """Known clients send their data subspace once, are clustered, then train per cluster.

    Args:
        num_clusters: ``K``, clusters of the hierarchical clustering.
        subspace_dim: ``d``, left singular vectors each client sends.
        agnostic: settings of the agnostic-client evaluation (``AgnosticSettings``).
        **kwargs: the shared settings of ``FederatedProtocol``.
    """

    def __init__(self, *, num_clusters: int = 2, subspace_dim: int = 5, agnostic: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
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
        self.trainer.declare_read("subspace (SVD of the client's images, sent in the clear)", mechanism=None)
        bases = []
        for c in range(data.num_clients):
            u = client_subspace(data.client(c).normalised(), self.subspace_dim)
            wire.send(Payload.from_tensors(kind="subspace", round=0, sender=f"client{c}", receiver="server",
                                           tensors={"U": u}, truth=data.clients[c].tolist()))
            bases.append(u.double().numpy())
        return cluster(proximity(bases), self.num_clusters), bases

    def start(self, model: nn.Module, labels: np.ndarray, theta0: State) -> ClusterRun:
        """The run state before round 0: every cluster model is ``theta0``."""
        models = {int(k): {n: t.clone() for n, t in theta0.items()} for k in set(labels.tolist())}
        return ClusterRun(layers=layers(model), labels=labels, models=models)

    def run(self, *, model: nn.Module, data: FederatedData, victim: Victim, wire: Wire, seed: int) -> ProtocolResult:
        scratch = copy.deepcopy(model)
        theta0 = parameters_of(model)
        labels, bases = self.cluster_clients(data, wire)
        state = self.start(model, labels, theta0)
        history: list[RoundRecord] = []
        per_client: dict[int, float] = {}
        for r in self.progress(range(self.rounds)):
            uploads: dict[int, list[Upload]] = defaultdict(list)
            for c in self.sample(r, data.num_clients, seed=seed, victim=victim):
                k = int(labels[c])
                at = ClientRound(c, r, seed, victim, wire, cluster=k)
                received = self.downlink(state, at)
                uploads[k].append(self.client_round(model, received, data, state, at))
            for k, ups in uploads.items():
                state.models[k] = aggregate(state.models[k], [(u.num_samples, u.tensors) for u in ups])
                self.after_aggregation(state, k, [u.layers for u in ups])
            wire.store.flush()
            acc, per_client = self.known_accuracy(scratch, data, lambda c: self.client_state(state, c))
            history.append(RoundRecord(r, acc, wire.totals()))
        clustering = Clustering(labels=tuple(int(k) for k in labels), bases=tuple(bases), models=dict(state.models),
                                genes={k: tuple(g) for k, g in state.genes.items()}, layers=state.layers)
        return ProtocolResult(theta0=theta0, final=state.models[int(labels[victim.client])], accuracy=history[-1].accuracy,
                              client_accuracy=per_client, history=tuple(history), clustering=clustering)

    def downlink(self, state: ClusterRun, at: ClientRound) -> State:
        """Send the cluster model to the client; return the state the client starts from."""
        assert at.cluster is not None
        cluster_state = state.models[at.cluster]
        at.wire.send(Payload.from_tensors(kind="cluster_model", round=at.round, sender="server", receiver=at.name,
                                          tensors=cluster_state, cluster=at.cluster))
        return {n: t.clone() for n, t in cluster_state.items()}

    def client_state(self, state: ClusterRun, c: int) -> State:
        """The model client ``c`` uses for inference (its cluster model unless overridden)."""
        return state.models[int(state.labels[c])]

    def after_aggregation(self, state: ClusterRun, k: int, uploaded_layers: list[list[str]]) -> None:
        """Hook after cluster ``k`` aggregated a round's uploads."""

    @abstractmethod
    def client_round(self, model: nn.Module, received: State, data: FederatedData, state: ClusterRun,
                     at: ClientRound) -> Upload:
        """Local training of client ``at.client``; returns its upload."""
