"""Agnostic clients: matched to a cluster by subspace, initialised from the cluster learnGene, fine-tuned."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from privbench.data import FederatedData, ImageDataset
from privbench.fl.genefl.settings import AgnosticSettings
from privbench.fl.genefl.subspace import nearest_cluster
from privbench.fl.protocols.base import ProtocolResult
from privbench.fl.protocols.clustered import ClusteredProtocol
from privbench.fl.reads import AGNOSTIC_FINETUNE, SUBSPACE, PlannedRead
from privbench.fl.sgd import State, client_accuracy, local_train, model_with
from privbench.fl.wire import Wire
from privbench.payloads import Payload

if TYPE_CHECKING:
    from privbench.fl.engine.base import Engine


def tune_set(data: FederatedData, a: int, settings: AgnosticSettings, *, seed: int) -> ImageDataset:
    """What agnostic client ``a`` fine-tunes on: all its images, or ``settings.samples`` of them."""
    adata = data.client(a, agnostic=True)
    if settings.samples and settings.samples < len(adata):
        keep = np.sort(np.random.default_rng([seed, a, 31]).permutation(len(adata))[: settings.samples])
        return adata.subset(torch.from_numpy(keep))
    return adata


def finetuned_accuracy(model: nn.Module, state: State, data: FederatedData, a: int, settings: AgnosticSettings, *,
                       seed: int) -> float:
    """Agnostic client ``a``'s accuracy on the test images of its classes after fine-tuning from ``state``."""
    local = model_with(model, state)
    if settings.epochs:
        local_train(local, tune_set(data, a, settings, seed=seed), epochs=settings.epochs, lr=settings.lr,
                    batch_size=settings.batch_size, generator=torch.Generator().manual_seed(seed * 7919 + a))
    return client_accuracy(local, data.test_agnostic, data.client_classes(a, agnostic=True))[0]


def evaluate_agnostic(result: ProtocolResult, *, protocol: ClusteredProtocol, round_: int, model: nn.Module,
                      data: FederatedData, wire: Wire, seed: int, reference: State | None = None,
                      engine: "Engine | None" = None) -> dict[str, Any]:
    """Score each agnostic client's fine-tuned accuracy from several initialisations.

    Each agnostic client sends its subspace, is matched to the nearest cluster ``k`` of
    ``result.clustering``, receives only the cluster learnGene (``cluster_gene``), starts
    from ``[theta_0 ; Theta_k^G]`` and fine-tunes (on ``engine``: in this process, or on its
    Flower SuperNode). The same fine-tuning budget (plain SGD: nothing is sent afterwards)
    is applied here, as the evaluator's counterfactuals, to ``random`` (``theta_0``),
    ``cluster_model`` (``Theta_k``) and, when ``reference`` is given, ``fedavg`` (a FedAvg
    global model trained with the same budget). Accuracy is on the agnostic test images of
    the client's own classes. Messages are sent in the ``agnostic`` phase as round
    ``round_``. The subspace goes through the protocol's trainer (DP-PCA when a DP trainer
    covers it); the fine-tuned models stay on the clients.
    """
    from privbench.fl.engine import InProcess

    engine = engine or InProcess()
    settings: AgnosticSettings = protocol.agnostic
    clustering = result.clustering
    if clustering is None:
        raise ValueError("agnostic clients need a clustered protocol's result")
    labels = np.array(clustering.labels)
    rows = []
    for a in range(len(data.agnostic_clients)):
        name = f"agnostic{a}"
        protocol.trainer.plan(name, [PlannedRead(SUBSPACE, len(data.agnostic_clients[a]))])
        u = engine.agnostic_subspace(protocol, data, a, wire, round_=round_, seed=seed)
        k = nearest_cluster(u, list(clustering.bases), labels, variant=protocol.subspace)
        gene = Payload.from_tensors(kind="cluster_gene", round=round_, sender="server", receiver=name,
                                    tensors={n: clustering.models[k][n] for n in clustering.gene_names(k)},
                                    cluster=k, phase="agnostic")
        protocol.trainer.declare_read(AGNOSTIC_FINETUNE, mechanism="kept on the client: nothing is sent",
                                      covered=True)
        row: dict[str, Any] = {"client": name, "cluster": k, "classes": data.client_classes(a, agnostic=True),
                               "gene_layers": list(clustering.genes.get(k, ())), "gene_bytes": gene.nbytes,
                               "tuned_on": len(tune_set(data, a, settings, seed=seed))}
        row["accuracy_learngene"] = engine.agnostic_finetune(protocol, model=model, data=data, a=a, gene=gene,
                                                             theta0=result.theta0, wire=wire, seed=seed)
        inits = {"random": result.theta0, "cluster_model": clustering.models[k]}
        if reference is not None:
            inits["fedavg"] = reference
        for init_name, state in inits.items():
            row[f"accuracy_{init_name}"] = finetuned_accuracy(model, state, data, a, settings, seed=seed)
        rows.append(row)
    means = {key: float(np.mean([r[key] for r in rows])) for key in rows[0] if key.startswith("accuracy_")}
    return {"clients": rows, **means}
