"""GENE-FL (arXiv 2504.14628): Fisher-elastic local training, learnGene uploads, per-layer aggregation."""
from __future__ import annotations

import copy
import math
from typing import Annotated, Any

import numpy as np
import torch
from torch import nn

from privbench.data import FederatedData, ImageDataset
from privbench.errors import ConfigError
from privbench.fl.engine import ClientSide, ClientTask
from privbench.fl.genefl.fisher import PENALTY_STEPS, GeneRegulariser, penalty_settings
from privbench.fl.genefl.learngene import adapt_gamma, cluster_gene, gene_size, select_by_size, select_layers, xi_scores
from privbench.fl.genefl.settings import GeneSettings
from privbench.fl.layers import layers, state_names
from privbench.fl.protocols.client import Replay
from privbench.fl.protocols.clustered import ClusteredProtocol, ClusterRun
from privbench.fl.protocols.round import ClientRound, ClientStart, PendingUpload, Upload
from privbench.fl.reads import FISHER, GAMMA_SIGNAL, LOCAL_SGD, PlannedRead
from privbench.fl.settings import settings
from privbench.fl.sgd import State, parameters_of
from privbench.fl.trainer import Trainer
from privbench.fl.wire import Outbox, Wire
from privbench.payloads import Condensation, LocalTraining, Payload
from privbench.payloads.encoding import decode
from privbench.payloads.transform import MessageTransform
from privbench.schema import Nested, NonNegative, Weight
from privbench.victim import Victim

DOWNLINKS = ("full", "gene")
#: What a cluster model holds for layers no member has sent yet: ``theta0`` (the initialisation), or
#: ``first_full`` (each client's first upload carries its whole model, which seeds every layer).
UNSENT = ("theta0", "first_full")


class GeneFL(ClusteredProtocol):
    """GENE-FL as reconstructed in ``docs/protocol.md``.

    Per round, a participant of cluster ``k`` receives ``Theta_k`` (``cluster_model``),
    computes the diagonal Fisher at it, trains ``local_epochs`` on
    ``CE + lambda1 ||theta - Theta_k||^2 + lambda2 sum_j 1[F_j >= eps] F_j (theta_j - Theta_k,j)^2``,
    scores its layers (``xi``), and uploads the ``gamma`` selected layers (``learngene``).
    The server averages each layer over the clients that sent it; the cluster learnGene is
    the set of layers a majority of the cluster sent in its latest round.

    Args:
        lambda1: weight of the smooth-update term.
        lambda2: weight of the Fisher-elastic term.
        eps: Fisher threshold of the elastic term.
        penalty_step: ``gradient`` (the paper: the penalty's gradient joins the loss's; refused where SGD on the
            penalty alone diverges, ``GeneRegulariser.check_stable``) or ``proximal`` (its exact proximal map after
            each step).
        gene: ``GeneSettings`` (``gamma``, ``select``, ``score``).
        downlink: ``full`` (the paper: the whole cluster model each round) or ``gene``
            (after a client's first round, only the cluster learnGene's layers; the client
            keeps its own model for the rest).
        unsent: ``theta0`` (layers nobody sent stay at the initialisation) or ``first_full``
            (a client's first upload is its whole model, so every layer of its cluster's model
            is trained once).
        **kwargs: ``ClusteredProtocol`` settings.
    """

    name = "genefl"
    sends = ("subspace", "cluster_model", "learngene", "gradient", "gene_gradient", "cluster_gene")
    replays_own_data = True

    def __init__(self, *, lambda1: Weight = 0.01, lambda2: Weight = 1.0, eps: NonNegative = 1e-6,
                 penalty_step: str = "gradient", gene: Annotated[dict[str, Any] | None, Nested(GeneSettings)] = None,
                 downlink: str = "full", unsent: str = "theta0", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if lambda1 < 0 or lambda2 < 0 or eps < 0:
            raise ConfigError("fl.lambda1, fl.lambda2 and fl.eps must be >= 0")
        if downlink not in DOWNLINKS:
            raise ConfigError(f"fl.downlink={downlink!r} is not one of {', '.join(DOWNLINKS)}")
        if penalty_step not in PENALTY_STEPS:
            raise ConfigError(f"fl.penalty_step={penalty_step!r} is not one of {', '.join(PENALTY_STEPS)}")
        if unsent not in UNSENT:
            raise ConfigError(f"fl.unsent={unsent!r} is not one of {', '.join(UNSENT)}")
        self.lambda1, self.lambda2, self.eps, self.downlink_mode = lambda1, lambda2, eps, downlink
        self.unsent, self.penalty_step = unsent, penalty_step
        self.gene = settings(GeneSettings, gene, key="fl.gene")
        #: a recorded round replayed with its recorded layer choice (an audit's rerun; None: GENE-FL chooses)
        self.replayed_layers: tuple[str, ...] | None = None

    @property
    def _fixed_count(self) -> bool:
        """Whether every upload keeps the same number of layers (a layer budget that does not move)."""
        return self.gene.budget == "layers" and not self.gene.adaptive

    def check_model(self, model: nn.Module) -> None:
        """``fl.gene.gamma`` must fit the model's layers."""
        if self._fixed_count:
            gene_size(self.gene.gamma, len(layers(model)))

    def remote_problem(self) -> str | None:
        if self.downlink_mode == "gene":
            return ("fl.downlink=gene rebuilds each client's model from the state it kept, which the server cannot "
                    "send; use fl.downlink=full (the paper)")
        return super().remote_problem()

    def start(self, model: nn.Module, labels: np.ndarray, theta0: State) -> ClusterRun:
        state = super().start(model, labels, theta0)
        state.gene_count = gene_size(self.gene.gamma, len(state.layers)) if self._fixed_count else 0
        return state

    def planned_reads(self, num_samples: int, *, victim: Victim | None) -> list[PlannedRead]:
        reads = super().planned_reads(num_samples, victim=victim)
        per_round = [r.num_samples for r in reads if r.what == LOCAL_SGD]
        if self.lambda2:  # a Fisher pass on the round's training data, every round
            reads += [PlannedRead(FISHER, n) for n in per_round]
        if self.gene.adaptive:  # the received model scored on the round's training data, every round
            reads += [PlannedRead(GAMMA_SIGNAL, n) for n in per_round]
        return reads

    def task_reads(self, request: ClientTask, side: ClientSide) -> list[PlannedRead]:
        """Also, in a ``round``, the Fisher pass and the adaptive gamma's signal on the round's training data."""
        reads = super().task_reads(request, side)
        if request.task == "round" and not request.agnostic:
            n = next(r.num_samples for r in reads if r.what == LOCAL_SGD)
            reads += [PlannedRead(FISHER, n)] if self.lambda2 else []
            reads += [PlannedRead(GAMMA_SIGNAL, n)] if self.gene.adaptive else []
        return reads

    def planned_penalty(self) -> tuple[dict[str, float], float]:
        """The Fisher-elastic penalty's weights (``GeneRegulariser.settings``) and ``lambda1``."""
        return penalty_settings(self.lambda1, self.lambda2, self.eps, self.penalty_step), float(self.lambda1)

    def upload_layers(self, upload: Payload | None, side: ClientSide) -> list[str]:
        """The learnGene's layers, as its condensation names them."""
        return list(upload.condensation.layers) if upload is not None and upload.condensation is not None else []

    def begin_round(self, model: nn.Module, start: ClientStart, data: FederatedData, state: Any) -> PendingUpload:
        """Also, with ``fl.gene.adaptive``: the client scores the model it received on its round's data and
        moves its gamma (``adapt_gamma``) before training."""
        pending = super().begin_round(model, start, data, state)
        if self.gene.adaptive:
            c, g = start.at.client, self.gene
            signal = self.trainer.local_accuracy(pending.job.model, pending.job.data, client=start.at.name,
                                                 read=GAMMA_SIGNAL)
            state.gamma[c] = adapt_gamma(state.gamma.get(c, g.gamma), state.signal.get(c), signal, step=g.step,
                                         low=g.gamma_min, high=g.gamma_max, tolerance=g.tolerance)
            state.signal[c] = signal
        return pending

    def downlink(self, state: ClusterRun, round_: int, c: int, k: int, down: Wire) -> Payload:
        """The whole cluster model, or with ``downlink=gene`` after the client's first round its learnGene only."""
        if self.downlink_mode == "full" or c not in state.personal or not state.genes.get(k):
            return super().downlink(state, round_, c, k, down)
        names = state.gene_names(k)
        return down.send(Payload.from_tensors(kind="cluster_model", round=round_, sender="server",
                                              receiver=f"client{c}", tensors={n: state.models[k][n] for n in names},
                                              cluster=k))

    def start_state(self, request: ClientTask, side: ClientSide) -> State:
        """What the client downloaded; a learnGene-only download on top of the client's own model."""
        received = super().start_state(request, side)
        own = side.state.personal.get(request.client)
        if self.downlink_mode == "gene" and own is not None and set(received) != set(own):
            return {**own, **received}
        return received

    def client_state(self, state: ClusterRun, c: int) -> State:
        if self.downlink_mode == "full" or c not in state.personal:
            return super().client_state(state, c)
        k = int(state.labels[c])
        return {**state.personal[c], **{n: state.models[k][n] for n in state.gene_names(k)}}

    def after_aggregation(self, state: ClusterRun, k: int, uploaded_layers: list[list[str]]) -> None:
        fallback = state.gene_count or max(1, round(sum(map(len, uploaded_layers)) / max(len(uploaded_layers), 1)))
        state.genes[k] = cluster_gene(uploaded_layers, list(state.layers), fallback)

    def regulariser(self, local: nn.Module, data: ImageDataset, at: ClientRound) -> GeneRegulariser:
        """The Fisher-elastic penalty around the received model, its Fisher computed on ``data``."""
        anchor = {n: p.detach().clone() for n, p in local.named_parameters()}
        fisher_noise = torch.Generator().manual_seed(at.batch_generator().initial_seed() + 101)
        fisher = self.trainer.fisher(local, data, client=at.name, generator=fisher_noise) if self.lambda2 else {}
        penalty = GeneRegulariser(anchor=anchor, fisher=fisher, lambda1=self.lambda1, lambda2=self.lambda2,
                                  eps=self.eps, step=self.penalty_step)
        penalty.check_stable(lr=self.sgd.lr, momentum=self.sgd.momentum, client=at.name)
        return penalty

    def end_round(self, pending: PendingUpload, training: LocalTraining, state: ClusterRun) -> Upload:
        at, step, received = pending.at, pending.step, pending.received
        after = parameters_of(pending.job.model)
        trained = {n for n, _ in pending.job.model.named_parameters()}
        params = {layer: [n for n in names if n in trained] for layer, names in state.layers.items()}
        scores = xi_scores(after, received, params, score=self.gene.score)
        chosen, gamma = self.condense(state, at, scores, after)
        names = state_names(state.layers, chosen)
        if step is not None:
            at.wire.send(Payload.from_tensors(kind="gene_gradient", round=at.round, sender=at.name, receiver="server",
                                              tensors={n: step.gradient[n] for n in names if n in step.gradient},
                                              base=pending.base_id, training=step.record),
                         truth=step.batch_truth.tolist())
        up = at.wire.send(Payload.from_tensors(
            kind="learngene", round=at.round, sender=at.name, receiver="server", tensors={n: after[n] for n in names},
            base=pending.base_id, cluster=at.cluster, training=training,
            condensation=Condensation(tuple(chosen), scores, gamma)), truth=pending.truth.tolist())
        state.personal[at.client] = after
        return Upload(len(pending.job.data), up, chosen)

    def condense(self, state: ClusterRun, at: ClientRound, scores: dict[str, float],
                 after: State) -> tuple[list[str], float | None]:
        """The layers this upload keeps, and the client's gamma where it moves (``fl.gene.adaptive``).

        With ``fl.unsent=first_full`` a client's first upload keeps every layer; a replayed round keeps the layers
        it recorded.
        """
        gamma = state.gamma.get(at.client, self.gene.gamma) if self.gene.adaptive else None
        if self.replayed_layers is not None:
            return list(self.replayed_layers), gamma
        if self.unsent == "first_full" and at.client not in state.personal:
            return list(state.layers), gamma
        rng = np.random.default_rng([at.seed, at.round, at.client, 17])
        g = self.gene.gamma if gamma is None else gamma
        if self.gene.budget == "size":
            sizes = {layer: sum(after[n].numel() for n in names) for layer, names in state.layers.items()}
            return select_by_size(scores, sizes, g, select=self.gene.select, rng=rng), gamma
        count = state.gene_count or max(1, math.ceil(g * len(state.layers)))
        return select_layers(scores, count, select=self.gene.select, rng=rng), gamma

    def replay_round(self, trainer: Trainer, model: nn.Module, data: FederatedData, *, recorded: Payload,
                     images: ImageDataset | None, generator: torch.Generator, seed: int, victim: Victim,
                     base_id: str, transform: MessageTransform | None = None,
                     layers: tuple[str, ...] | None = None) -> Replay:
        """A GENE-FL client's round run again by GENE-FL's own client code (its Fisher pass, penalty, xi and layer
        choice, or the recorded choice ``layers``) on its own data, with ``trainer`` in the run's trainer's place
        (``images`` and ``generator`` are its own: the client draws them as it did)."""
        rerun = copy.copy(self)
        rerun.trainer, rerun.replayed_layers = trainer, layers
        download = parameters_of(model)
        outbox = Outbox(sends=self.wire_kinds, trainer=trainer, transform=transform)
        outbox.received(recorded.sender, download)
        at = ClientRound(int(recorded.sender.removeprefix("client")), recorded.round, seed, victim, outbox,
                         cluster=recorded.cluster)
        local = copy.deepcopy(model)
        state = rerun.start(local, np.zeros(data.num_clients, dtype=int), download)
        pending = rerun.begin_round(local, ClientStart(at, download, base_id), data, state)
        training, = rerun.train_clients([pending.job])
        upload = rerun.end_round(pending, training, state)
        return Replay(upload, decode(upload.payload, download), training, pending.job.data)
