"""Agnostic clients: matched to a cluster by subspace, initialised from the cluster learnGene, fine-tuned."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.data import FederatedData
from privbench.fl.genefl.settings import AgnosticSettings
from privbench.fl.genefl.subspace import nearest_cluster
from privbench.fl.protocols.base import ProtocolResult
from privbench.fl.protocols.clustered import ClusteredProtocol
from privbench.fl.reads import AGNOSTIC_FINETUNE, SUBSPACE, PlannedRead
from privbench.fl.sgd import State, client_accuracy, local_train, model_with
from privbench.fl.wire import Wire
from privbench.payloads import Payload


def evaluate_agnostic(result: ProtocolResult, *, protocol: ClusteredProtocol, round_: int, model: nn.Module,
                      data: FederatedData, wire: Wire, seed: int, reference: State | None = None) -> dict[str, Any]:
    """Score each agnostic client's fine-tuned accuracy from several initialisations.

    Each agnostic client sends its subspace, is matched to the nearest cluster ``k`` of
    ``result.clustering``, receives only the cluster learnGene (``cluster_gene``) and starts
    from ``[theta_0 ; Theta_k^G]``. The same fine-tuning budget (plain SGD: nothing is sent
    afterwards) is applied to ``random`` (``theta_0``), ``cluster_model`` (``Theta_k``) and,
    when ``reference`` is given, ``fedavg`` (a FedAvg global model trained with the same
    budget). Accuracy is on the agnostic test images of the client's own classes. Messages
    are sent in the ``agnostic`` phase as round ``round_``. The subspace goes through the
    protocol's trainer (DP-PCA when a DP trainer covers it); the fine-tuned models stay on
    the clients.
    """
    settings: AgnosticSettings = protocol.agnostic
    clustering = result.clustering
    if clustering is None:
        raise ValueError("agnostic clients need a clustered protocol's result")
    labels = np.array(clustering.labels)
    rows = []
    for a in range(len(data.agnostic_clients)):
        name = f"agnostic{a}"
        adata = data.client(a, agnostic=True)
        protocol.trainer.plan(name, [PlannedRead(SUBSPACE, len(adata))])
        u = protocol.client_basis(adata, client=name, seed=seed)
        up = wire.send(Payload.from_tensors(kind="subspace", round=round_, sender=name, receiver="server",
                                            tensors={"U": u}, phase="agnostic", truth=data.agnostic_clients[a].tolist()))
        assert up.tensors is not None
        k = nearest_cluster(up.tensors["U"].double().numpy(), list(clustering.bases), labels, variant=protocol.subspace)
        sent = wire.send(Payload.from_tensors(kind="cluster_gene", round=round_, sender="server", receiver=name,
                                              tensors={n: clustering.models[k][n] for n in clustering.gene_names(k)},
                                              cluster=k, phase="agnostic"))
        assert sent.tensors is not None
        inits = {"learngene": {**result.theta0, **sent.tensors}, "random": result.theta0,
                 "cluster_model": clustering.models[k]}
        if reference is not None:
            inits["fedavg"] = reference
        classes = data.client_classes(a, agnostic=True)
        tune = adata
        if settings.samples and settings.samples < len(adata):
            keep = np.sort(np.random.default_rng([seed, a, 31]).permutation(len(adata))[: settings.samples])
            tune = adata.subset(torch.from_numpy(keep))
        protocol.trainer.declare_read(AGNOSTIC_FINETUNE, mechanism="kept on the client: nothing is sent",
                                      covered=True)
        row: dict[str, Any] = {"client": name, "cluster": k, "classes": classes,
                               "gene_layers": list(clustering.genes.get(k, ())), "gene_bytes": sent.nbytes,
                               "tuned_on": len(tune)}
        for init_name, state in inits.items():
            local = model_with(model, state)
            generator = torch.Generator().manual_seed(seed * 7919 + a)
            if settings.epochs:
                local_train(local, tune, epochs=settings.epochs, lr=settings.lr, batch_size=settings.batch_size,
                            generator=generator)
            row[f"accuracy_{init_name}"] = client_accuracy(local, data.test_agnostic, classes)[0]
        rows.append(row)
    means = {key: float(np.mean([r[key] for r in rows])) for key in rows[0] if key.startswith("accuracy_")}
    return {"clients": rows, **means}
