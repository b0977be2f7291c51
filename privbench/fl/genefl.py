"""GENE-FL (arXiv 2504.14628): Fisher-elastic local training, learnGene uploads, per-layer aggregation."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.data import FederatedData
from privbench.errors import ConfigError
from privbench.fl.clustered import ClusteredProtocol
from privbench.fl.fisher import fisher_diagonal, gene_regulariser
from privbench.fl.learngene import cluster_gene, gene_size, layers, select_layers, xi_scores
from privbench.fl.local import parameters_of
from privbench.fl.settings import GeneSettings, settings
from privbench.fl.victim import Victim
from privbench.fl.wire import Wire
from privbench.payloads import Payload

DOWNLINKS = ("full", "gene")


class GeneFL(ClusteredProtocol):
    """GENE-FL as reconstructed in DESIGN.md section 1.

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
        gene: ``GeneSettings`` (``gamma``, ``select``, ``score``).
        downlink: ``full`` (the paper: the whole cluster model each round) or ``gene``
            (after a client's first round, only the cluster learnGene's layers; the client
            keeps its own model for the rest).
        **kwargs: ``ClusteredProtocol`` settings.
    """

    name = "genefl"
    emits = ("subspace", "cluster_model", "learngene", "gradient", "gene_gradient", "cluster_gene")

    def __init__(self, *, lambda1: float = 0.01, lambda2: float = 1.0, eps: float = 1e-6, gene: dict | None = None,
                 downlink: str = "full", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if lambda1 < 0 or lambda2 < 0 or eps < 0:
            raise ConfigError("fl.lambda1, fl.lambda2 and fl.eps must be >= 0")
        if downlink not in DOWNLINKS:
            raise ConfigError(f"fl.downlink={downlink!r} is not one of {', '.join(DOWNLINKS)}")
        self.lambda1, self.lambda2, self.eps, self.downlink_mode = lambda1, lambda2, eps, downlink
        self.gene = settings(GeneSettings, gene, key="fl.gene")

    def hparams(self) -> dict[str, Any]:
        return {**super().hparams(), "lambda1": self.lambda1, "lambda2": self.lambda2, "eps": self.eps}

    def downlink(self, model, cluster_state, c, k, r, wire):
        gene = self.genes.get(k)
        if self.downlink_mode == "full" or c not in self.personal or not gene:
            return super().downlink(model, cluster_state, c, k, r, wire)
        names = [n for layer in gene for n in self.layer_names[layer]]
        wire.send(Payload.from_tensors(kind="cluster_model", round=r, sender="server", receiver=f"client{c}",
                                       tensors={n: cluster_state[n] for n in names}, cluster=k))
        return {**self.personal[c], **{n: cluster_state[n].clone() for n in names}}

    def client_state(self, cluster_state, c):
        if self.downlink_mode == "full" or c not in self.personal:
            return cluster_state
        gene = [n for layer in self.genes.get(self.cluster_of.get(c, -1), []) for n in self.layer_names[layer]]
        return {**self.personal[c], **{n: cluster_state[n] for n in gene}}

    def run(self, *, model, data, victim, wire, seed):
        self.layer_names = layers(model)
        self.count = gene_size(self.gene.gamma, len(self.layer_names))
        self.cluster_of: dict[int, int] = {}
        return super().run(model=model, data=data, victim=victim, wire=wire, seed=seed)

    def after_aggregation(self, k: int, uploaded_layers: list[list[str]]) -> None:
        self.genes[k] = cluster_gene(uploaded_layers, list(self.layer_names), self.count)

    def client_round(self, model: nn.Module, received: dict[str, torch.Tensor], data: FederatedData, c: int, k: int,
                     r: int, victim: Victim, wire: Wire, seed: int) -> tuple[int, dict[str, torch.Tensor], list[str]]:
        name = f"client{c}"
        self.cluster_of[c] = k
        base_id = f"r{r:04d}-cluster_model-server-{name}"
        local = self.fresh(model, received)
        client_data, truth = data.client(c), data.clients[c]
        is_victim = (c, r) == (victim.client, victim.round)
        grad = None
        if is_victim:
            grad, client_data, truth = self.victim_gradient(local, client_data, truth, c, r, victim, wire, base_id, seed)
        anchor = {n: p.detach().clone() for n, p in local.named_parameters()}
        fisher = fisher_diagonal(local, client_data) if self.lambda2 else {}
        if self.private is not None and self.lambda2:
            self.private.reads_uncovered.add("genefl fisher_diagonal (computed on private data without noise)")
        steps = self.local_update(
            local, client_data, client=c, round_=r, seed=seed,
            regulariser=lambda m: gene_regulariser(m, anchor, fisher, lambda1=self.lambda1, lambda2=self.lambda2, eps=self.eps),
        )
        after = parameters_of(local)
        params = {layer: [n for n in names if n in anchor] for layer, names in self.layer_names.items()}
        scores = xi_scores(after, received, params, score=self.gene.score)
        rng = np.random.default_rng([seed, r, c, 17])
        chosen = select_layers(scores, self.count, select=self.gene.select, rng=rng)
        names = [n for layer in chosen for n in self.layer_names[layer]]
        if is_victim:
            wire.send(Payload.from_tensors(
                kind="gene_gradient", round=r, sender=name, receiver="server",
                tensors={n: grad[n] for n in names if n in grad}, base=base_id,
                hparams={"batch_size": victim.num_images, "local_steps": 1}, truth=truth.tolist(),
            ))
        up = wire.send(Payload.from_tensors(
            kind="learngene", round=r, sender=name, receiver="server", tensors={n: after[n] for n in names},
            base=base_id, cluster=k, truth=truth.tolist(),
            hparams={**self.hparams(), "local_steps": steps, "num_samples": len(client_data), "gene_layers": chosen,
                     "xi": scores},
        ))
        self.personal[c] = after
        return len(client_data), up.tensors, chosen
