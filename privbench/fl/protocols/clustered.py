"""Clustered protocols (GENE-FL, cluster-FedAvg): one-shot subspace clustering, per-cluster rounds."""
from __future__ import annotations

import copy
from abc import abstractmethod
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.data import FederatedData, ImageDataset
from privbench.errors import ConfigError
from privbench.fl.aggregate import aggregate
from privbench.fl.genefl.learngene import layers, state_names
from privbench.fl.genefl.settings import AgnosticSettings
from privbench.fl.genefl.subspace import SUBSPACES, cluster, proximity
from privbench.fl.reads import SUBSPACE, PlannedRead
from privbench.fl.engine import Engine, InProcess
from privbench.fl.protocols.base import (ClientRound, ClientStart, Clustering, FederatedProtocol, PendingUpload,
                                         ProtocolResult, RoundRecord, Upload)
from privbench.fl.settings import settings
from privbench.fl.sgd import State, parameters_of
from privbench.fl.wire import Wire
from privbench.payloads import LocalTraining, Payload
from privbench.victim import Victim

EVALS = ("cluster", "personal", "both")


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


class ClusteredProtocol(FederatedProtocol):
    """Known clients send their data subspace once, are clustered, then train per cluster.

    Args:
        num_clusters: ``K``, clusters of the hierarchical clustering.
        subspace_dim: ``d``, left singular vectors each client sends (per class with ``pacfl``).
        subspace: ``svd`` (one SVD of all a client's images, summed principal angles) or
            ``pacfl`` (one SVD per class, the smallest principal angle, as in PACFL).
        eval: known-client accuracy of ``cluster`` (the model a client gets from its
            cluster), ``personal`` (each client's own model after its latest local training;
            its cluster model before it first trains), or ``both`` (``accuracy`` is then the
            cluster figure and ``personal_accuracy`` the other).
        agnostic: settings of the agnostic-client evaluation (``AgnosticSettings``).
        **kwargs: the shared settings of ``FederatedProtocol``.
    """

    def __init__(self, *, num_clusters: int = 2, subspace_dim: int = 5, subspace: str = "svd", eval: str = "cluster",
                 agnostic: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if subspace not in SUBSPACES:
            raise ConfigError(f"fl.subspace={subspace!r} is not one of {', '.join(SUBSPACES)}")
        if eval not in EVALS:
            raise ConfigError(f"fl.eval={eval!r} is not one of {', '.join(EVALS)}")
        self.evaluation = eval
        self.num_clusters, self.subspace_dim, self.subspace = num_clusters, subspace_dim, subspace
        self.agnostic = settings(AgnosticSettings, agnostic, key="fl.agnostic")

    def check(self, *, data: FederatedData, victim: Victim) -> None:
        super().check(data=data, victim=victim)
        if not 1 <= self.num_clusters <= data.num_clients:
            raise ConfigError(f"fl.num_clusters={self.num_clusters} must be in 1..{data.num_clients} (data.num_clients)")
        smallest = min(len(c) for c in data.clients)
        if not 1 <= self.subspace_dim <= smallest:
            raise ConfigError(f"fl.subspace_dim={self.subspace_dim} must be in 1..{smallest} (the smallest client's samples)")

    def engine_problem(self) -> str | None:
        if self.engine == "flower" and self.evaluation != "cluster":
            return (f"fl.eval={self.evaluation} scores each client's own trained model, which stays on its ClientApp; "
                    "use fl.eval=cluster")
        return super().engine_problem()

    def planned_reads(self, num_samples: int, *, victim: Victim | None) -> list[PlannedRead]:
        return [PlannedRead(SUBSPACE, num_samples), *super().planned_reads(num_samples, victim=victim)]

    def client_basis(self, data: ImageDataset, *, client: str, seed: int) -> torch.Tensor:
        """The subspace ``U`` a client sends, by the trainer (so a DP trainer can protect it)."""
        generator = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, 53, *client.encode()])
                                                      .generate_state(1)[0]))
        return self.trainer.subspace(data.normalised(), min(self.subspace_dim, len(data)), client=client,
                                     generator=generator, labels=data.labels if self.subspace == "pacfl" else None)

    def send_subspace(self, data: FederatedData, c: int, wire: Wire, *, seed: int, agnostic: bool = False,
                      round_: int = 0) -> np.ndarray:
        """Client ``c`` (agnostic client ``c`` when ``agnostic``, in phase ``agnostic`` as round ``round_``) sends
        its subspace ``U_c`` (``subspace``); returns it as the server read it."""
        name = f"agnostic{c}" if agnostic else f"client{c}"
        u = self.client_basis(data.client(c, agnostic=agnostic), client=name, seed=seed)
        truth = (data.agnostic_clients if agnostic else data.clients)[c].tolist()
        sent = wire.send(Payload.from_tensors(kind="subspace", round=round_, sender=name, receiver="server",
                                              tensors={"U": u}, phase="agnostic" if agnostic else "training",
                                              truth=truth))
        assert sent.tensors is not None
        return sent.tensors["U"].double().numpy()

    def cluster_clients(self, data: FederatedData, wire: Wire, *, seed: int,
                        engine: Engine | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
        """Every known client sends ``U_i`` (``subspace``); the server clusters the subspaces."""
        bases = (engine or InProcess()).subspaces(self, data, wire, seed=seed)
        return cluster(proximity(bases, variant=self.subspace), self.num_clusters), bases

    def start(self, model: nn.Module, labels: np.ndarray, theta0: State) -> ClusterRun:
        """The run state before round 0: every cluster model is ``theta0``."""
        models = {int(k): {n: t.clone() for n, t in theta0.items()} for k in set(labels.tolist())}
        return ClusterRun(layers=layers(model), labels=labels, models=models)

    def run(self, *, model: nn.Module, data: FederatedData, victim: Victim, wire: Wire, seed: int,
            engine: Engine | None = None) -> ProtocolResult:
        engine = engine or InProcess()
        self.plan_reads(data, victim)
        scratch = copy.deepcopy(model)
        theta0 = parameters_of(model)
        labels, bases = self.cluster_clients(data, wire, seed=seed, engine=engine)
        state = self.start(model, labels, theta0)
        history: list[RoundRecord] = []
        scores: dict[str, tuple[float, dict[int, float]]] = {}
        headline, both = ("personal" if self.evaluation == "personal" else "cluster"), self.evaluation == "both"
        for r in self.progress(range(self.rounds)):
            starts, down = [], engine.downlink_wire(wire)
            for c in self.sample(r, data.num_clients, seed=seed, victim=victim):
                at = ClientRound(c, r, seed, victim, down, cluster=int(labels[c]))
                starts.append(ClientStart(at, self.downlink(state, at), f"r{r:04d}-cluster_model-server-{at.name}"))
            uploads: dict[int, list[Upload]] = defaultdict(list)
            for start, upload in zip(starts, engine.train_round(self, model=model, data=data, state=state,
                                                                 starts=starts)):
                uploads[int(labels[start.at.client])].append(upload)
            for k, ups in uploads.items():
                state.models[k] = aggregate(state.models[k], [(u.num_samples, u.tensors) for u in ups])
                self.after_aggregation(state, k, [u.layers for u in ups])
            wire.store.flush()
            scores = self.scores(scratch, data, state)
            personal = scores["personal"][0] if both else None
            history.append(RoundRecord(r, scores[headline][0], wire.totals(), personal_accuracy=personal))
        clustering = Clustering(labels=tuple(int(k) for k in labels), bases=tuple(bases), models=dict(state.models),
                                genes={k: tuple(g) for k, g in state.genes.items()}, layers=state.layers)
        return ProtocolResult(theta0=theta0, final=state.models[int(labels[victim.client])],
                              accuracy=scores[headline][0], client_accuracy=scores[headline][1],
                              history=tuple(history), clustering=clustering,
                              personal_accuracy=scores["personal"][0] if both else None,
                              personal_client_accuracy=scores["personal"][1] if both else None)

    def scores(self, scratch: nn.Module, data: FederatedData,
               state: ClusterRun) -> dict[str, tuple[float, dict[int, float]]]:
        """Known-client accuracy (pooled, per client) of the cluster and/or personal models, as ``eval`` asks."""
        out = {}
        if self.evaluation in ("cluster", "both"):
            out["cluster"] = self.known_accuracy(scratch, data, lambda c: self.client_state(state, c))
        if self.evaluation in ("personal", "both"):
            out["personal"] = self.known_accuracy(
                scratch, data, lambda c: state.personal.get(c) or self.client_state(state, c))
        return out

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
    def end_round(self, pending: PendingUpload, training: LocalTraining, state: ClusterRun) -> Upload:
        """After local training: the client's upload (``learngene`` or ``update``)."""
