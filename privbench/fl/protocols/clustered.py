"""Clustered protocols (GENE-FL, cluster-FedAvg): one-shot subspace clustering, per-cluster rounds."""
from __future__ import annotations

from abc import abstractmethod
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import numpy as np
import torch
from torch import nn

from privbench.data import FederatedData, ImageDataset
from privbench.errors import ConfigError
from privbench.fl.clustering.agnostic import AgnosticSettings, finetuned_accuracy
from privbench.fl.clustering.subspace import SUBSPACES, cluster, proximity
from privbench.fl.engine import ClientSide, ClientTask, Engine, TaskReply
from privbench.fl.layers import layers, state_names
from privbench.fl.protocols.base import FederatedProtocol
from privbench.fl.protocols.client import TaskHandler
from privbench.fl.protocols.cohort import Cohort
from privbench.fl.protocols.result import Clustering, ProtocolResult, RoundRecord
from privbench.fl.protocols.round import PendingUpload, Upload
from privbench.fl.reads import SUBSPACE, PlannedRead
from privbench.fl.settings import settings
from privbench.fl.sgd import State, known_accuracy
from privbench.fl.wire import Wire
from privbench.payloads import LocalTraining, Payload
from privbench.schema import Nested, PositiveInt
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
        gene_count: layers in a learnGene (GENE-FL; 0 where the count varies by upload).
        gamma: each client's current gamma (GENE-FL's adaptive gamma; kept by the client).
        signal: each client's latest accuracy of the model it received (adaptive gamma).
        bases: each known client's subspace basis as the server read it.
        scores: the latest known-client accuracies (pooled, per client) by model (``cluster``, ``personal``).
    """

    layers: dict[str, list[str]]
    labels: np.ndarray
    models: dict[int, State]
    genes: dict[int, list[str]] = field(default_factory=dict)
    personal: dict[int, State] = field(default_factory=dict)
    gene_count: int = 0
    gamma: dict[int, float] = field(default_factory=dict)
    signal: dict[int, float] = field(default_factory=dict)
    bases: list[np.ndarray] = field(default_factory=list)
    scores: dict[str, tuple[float, dict[int, float]]] = field(default_factory=dict)

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

    def __init__(self, *, num_clusters: PositiveInt = 2, subspace_dim: PositiveInt = 5, subspace: str = "svd",
                 eval: str = "cluster", agnostic: Annotated[dict[str, Any] | None, Nested(AgnosticSettings)] = None,
                 **kwargs: Any) -> None:
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

    def cohort_sizes(self) -> list[int]:
        """A cluster's share of a round: any number of the participants."""
        return list(range(1, self.participants + 1))

    def remote_problem(self) -> str | None:
        if self.evaluation != "cluster":
            return (f"fl.eval={self.evaluation} scores each client's own trained model, which stays on its ClientApp; "
                    "use fl.eval=cluster")
        return super().remote_problem()

    def planned_reads(self, num_samples: int, *, victim: Victim | None) -> list[PlannedRead]:
        return [PlannedRead(SUBSPACE, num_samples), *super().planned_reads(num_samples, victim=victim)]

    def task_reads(self, request: ClientTask, side: ClientSide) -> list[PlannedRead]:
        """Also a ``subspace``: one read of all the client's data."""
        if request.task == "subspace":
            held = side.data.agnostic_clients if request.agnostic else side.data.clients
            return [PlannedRead(SUBSPACE, len(held[request.client]))]
        return super().task_reads(request, side)

    def plan_reads(self, data: FederatedData, victim: Victim) -> None:
        """The known clients' reads, and each agnostic client's one subspace (the same plan on every node)."""
        super().plan_reads(data, victim)
        for a, held in enumerate(data.agnostic_clients):
            self.trainer.plan(f"agnostic{a}", [PlannedRead(SUBSPACE, len(held))])

    def client_basis(self, data: ImageDataset, *, client: str, seed: int) -> torch.Tensor:
        """The subspace ``U`` a client sends, by the trainer (so a DP trainer can protect it)."""
        generator = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, 53, *client.encode()])
                                                      .generate_state(1)[0]))
        return self.trainer.subspace(data.normalised(), min(self.subspace_dim, len(data)), client=client,
                                     generator=generator, labels=data.labels if self.subspace == "pacfl" else None)

    def send_subspace(self, data: FederatedData, c: int, wire: Wire, *, seed: int, agnostic: bool = False,
                      round_: int = 0) -> Payload:
        """Client ``c`` (agnostic client ``c`` when ``agnostic``, in phase ``agnostic`` as round ``round_``) sends
        its subspace ``U_c`` (``subspace``); returns the message as sent."""
        name = f"agnostic{c}" if agnostic else f"client{c}"
        u = self.client_basis(data.client(c, agnostic=agnostic), client=name, seed=seed)
        truth = (data.agnostic_clients if agnostic else data.clients)[c].tolist()
        sent = wire.send(Payload.from_tensors(kind="subspace", round=round_, sender=name, receiver="server",
                                              tensors={"U": u}, phase="agnostic" if agnostic else "training"),
                         truth=truth)
        return sent

    @staticmethod
    def basis(reply: TaskReply) -> np.ndarray:
        """The subspace a ``subspace`` reply carries, as the server reads it."""
        assert reply.payload is not None and reply.payload.tensors is not None, "a subspace reply carries U"
        return reply.payload.tensors["U"].double().numpy()

    def client_tasks(self) -> dict[str, TaskHandler]:
        return {**super().client_tasks(), "subspace": self.serve_subspace, "agnostic_tune": self.serve_agnostic_tune}

    def serve_subspace(self, requests: Sequence[ClientTask], side: ClientSide) -> list[TaskReply]:
        """The ``subspace`` task: each client (known, or agnostic) sends its subspace."""
        return [TaskReply(payload=self.send_subspace(side.data, r.client, side.wire, seed=side.seed,
                                                     agnostic=r.agnostic, round_=r.round)) for r in requests]

    def serve_agnostic_tune(self, requests: Sequence[ClientTask], side: ClientSide) -> list[TaskReply]:
        """The ``agnostic_tune`` task: an agnostic client fine-tunes from ``[theta_0 ; its cluster learnGene]``."""
        out = []
        for r in requests:
            gene = r.downloads[0].tensors
            assert gene is not None, "the cluster learnGene carries its tensors"
            acc = finetuned_accuracy(side.model, {**side.theta0, **gene}, side.data, r.client, self.agnostic,
                                     seed=side.seed)
            out.append(TaskReply({"tuned_accuracy": acc}))
        return out

    def check_reply(self, request: ClientTask, reply: TaskReply, sent: Sequence[Payload], side: ClientSide) -> None:
        """Also: a subspace is one ``[C*H*W, d]`` basis ``U``; a fine-tuned accuracy a number in [0, 1]."""
        super().check_reply(request, reply, sent, side)
        if request.task == "subspace":
            c, h, w = side.data.train.shape
            tensors = reply.payload.tensors if reply.payload is not None else None
            u = tensors.get("U") if tensors is not None and list(tensors) == ["U"] else None
            if u is None or u.dim() != 2 or u.shape[0] != c * h * w:
                raise ValueError(f"its subspace is not one [{c * h * w}, d] basis U")
        if request.task == "agnostic_tune":
            acc = reply.fields.get("tuned_accuracy")
            if not isinstance(acc, float) or not 0.0 <= acc <= 1.0:
                raise ValueError(f"it reports an accuracy of {acc!r}")

    def remote_state(self, side: ClientSide) -> ClusterRun:
        """A node keeps the model's layers, the learnGene size and its client's own model (no cluster state)."""
        return self.start(side.model, np.zeros(side.data.num_clients, dtype=int), side.theta0)

    def cluster_clients(self, engine: Engine, side: ClientSide) -> tuple[np.ndarray, list[np.ndarray]]:
        """Every known client sends ``U_i`` (``subspace``); the server clusters the subspaces."""
        requests = [ClientTask("subspace", c, 0) for c in range(side.data.num_clients)]
        bases = [self.basis(r) for r in engine.run(self, requests, side)]
        return cluster(proximity(bases, variant=self.subspace), self.num_clusters), bases

    def start(self, model: nn.Module, labels: np.ndarray, theta0: State) -> ClusterRun:
        """The run state before round 0: every cluster model is ``theta0``."""
        models = {int(k): {n: t.clone() for n, t in theta0.items()} for k in set(labels.tolist())}
        return ClusterRun(layers=layers(model), labels=labels, models=models)

    def setup(self, engine: Engine, side: ClientSide) -> ClusterRun:
        labels, bases = self.cluster_clients(engine, side)
        state = self.start(side.model, labels, side.theta0)
        state.bases = bases
        return state

    def configure_round(self, state: ClusterRun, round_: int, side: ClientSide, down: Wire) -> list[ClientTask]:
        """Send each sampled client its cluster's model (``downlink``)."""
        tasks = []
        for c in self.sample(round_, side.data.num_clients, seed=side.seed, victim=side.victim):
            k = int(state.labels[c])
            sent = self.downlink(state, round_, c, k, down)
            tasks.append(ClientTask("round", c, round_, (sent,), {"cluster": k}))
        return tasks

    def aggregate(self, state: ClusterRun, requests: Sequence[ClientTask], replies: Sequence[TaskReply],
                  cohort: Cohort) -> None:
        """Per cluster, average the uploads of its clients (in the order they were asked)."""
        uploads: dict[int, list[Upload]] = defaultdict(list)
        for request, reply in zip(requests, replies):
            uploads[int(state.labels[request.client])].append(Upload.from_reply(reply))
        for k, ups in uploads.items():
            state.models[k] = cohort.combine(state.models[k], ups, round_=requests[0].round, group=k)
            self.after_aggregation(state, k, [u.layers for u in ups])

    def _headline(self) -> str:
        return "personal" if self.evaluation == "personal" else "cluster"

    def evaluate(self, state: ClusterRun, round_: int, scratch: nn.Module, side: ClientSide) -> RoundRecord:
        state.scores = self.scores(scratch, side.data, state)
        personal = state.scores["personal"][0] if self.evaluation == "both" else None
        return RoundRecord(round_, state.scores[self._headline()][0], side.wire.totals(), personal_accuracy=personal)

    def result(self, state: ClusterRun, history: tuple[RoundRecord, ...], side: ClientSide) -> ProtocolResult:
        both, scores, labels = self.evaluation == "both", state.scores, state.labels
        clustering = Clustering(labels=tuple(int(k) for k in labels), bases=tuple(state.bases),
                                models=dict(state.models), genes={k: tuple(g) for k, g in state.genes.items()},
                                layers=state.layers)
        return ProtocolResult(theta0=side.theta0, final=state.models[int(labels[side.victim.client])],
                              accuracy=scores[self._headline()][0], client_accuracy=scores[self._headline()][1],
                              history=history, clustering=clustering,
                              personal_accuracy=scores["personal"][0] if "personal" in scores else None,
                              personal_client_accuracy=scores["personal"][1] if both else None,
                              downloaded_accuracy=scores["cluster"][0] if "cluster" in scores else None)

    def scores(self, scratch: nn.Module, data: FederatedData,
               state: ClusterRun) -> dict[str, tuple[float, dict[int, float]]]:
        """Known-client accuracy (pooled, per client) of the cluster and/or personal models, as ``eval`` asks."""
        out = {}
        if self.evaluation in ("cluster", "both"):
            out["cluster"] = known_accuracy(scratch, data, lambda c: self.client_state(state, c))
        if self.evaluation in ("personal", "both"):
            out["personal"] = known_accuracy(
                scratch, data, lambda c: state.personal.get(c) or self.client_state(state, c))
        return out

    def downlink(self, state: ClusterRun, round_: int, c: int, k: int, down: Wire) -> Payload:
        """Send client ``c`` its cluster ``k``'s model; return the message as sent."""
        return down.send(Payload.from_tensors(kind="cluster_model", round=round_, sender="server",
                                              receiver=f"client{c}", tensors=state.models[k], cluster=k))

    def client_state(self, state: ClusterRun, c: int) -> State:
        """The model client ``c`` uses for inference (its cluster model unless overridden)."""
        return state.models[int(state.labels[c])]

    def after_aggregation(self, state: ClusterRun, k: int, uploaded_layers: list[list[str]]) -> None:
        """Hook after cluster ``k`` aggregated a round's uploads."""

    @abstractmethod
    def end_round(self, pending: PendingUpload, training: LocalTraining, state: ClusterRun) -> Upload:
        """After local training: the client's upload (``learngene`` or ``update``)."""
