"""Agnostic clients: matched to a cluster by subspace, initialised from the cluster learnGene, fine-tuned."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.data import FederatedData
from privbench.fl.local import client_accuracy, local_train
from privbench.fl.subspace import client_subspace, nearest_cluster
from privbench.fl.victim import Victim
from privbench.fl.wire import Wire
from privbench.payloads import CapturePolicy, Payload, PayloadStore


def fedavg_reference(protocol, *, model: nn.Module, data: FederatedData, theta0: dict[str, torch.Tensor], wire: Wire,
                     seed: int) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
    """Train FedAvg with the protocol's budget from ``theta0``; its messages go to a side store.

    Returns the global model and FedAvg's byte totals (for GENE-FL / FedAvg ratios).
    """
    from privbench.fl.fedavg import FedAvg

    fedavg = FedAvg(rounds=protocol.rounds, participants=protocol.participants, local_epochs=protocol.local_epochs,
                    lr=protocol.lr, batch_size=protocol.batch_size, momentum=protocol.momentum)
    side = Wire(PayloadStore(wire.store.root.parent / "payloads_fedavg_reference"),
                CapturePolicy(kinds=frozenset(), rounds="all", clients="all"))
    reference = protocol.fresh(model, theta0)
    fedavg.run(model=reference, data=data, victim=Victim(round=-1), wire=side, seed=seed)
    return {n: t.detach().clone() for n, t in reference.state_dict().items()}, side.totals()


def evaluate_agnostic(protocol, *, model: nn.Module, data: FederatedData, theta0: dict[str, torch.Tensor],
                      clusters: dict[int, dict[str, torch.Tensor]], labels: np.ndarray, bases: list[np.ndarray],
                      wire: Wire, seed: int) -> dict[str, Any]:
    """Score each agnostic client's fine-tuned accuracy from several initialisations.

    Each agnostic client sends its subspace, is matched to the nearest cluster ``k``,
    receives only the cluster learnGene (``cluster_gene``) and starts from
    ``[theta_0 ; Theta_k^G]``. The same fine-tuning budget is applied to ``random``
    (``theta_0``), ``cluster_model`` (``Theta_k``) and, if enabled, ``fedavg`` (a FedAvg
    global model trained with the same budget). Accuracy is on the agnostic test images of
    the client's own classes.
    """
    settings = protocol.agnostic
    reference, fedavg_bytes = (None, None)
    if settings.fedavg_reference:
        reference, fedavg_bytes = fedavg_reference(protocol, model=model, data=data, theta0=theta0, wire=wire, seed=seed)
    rows = []
    for a in range(len(data.agnostic_clients)):
        name = f"agnostic{a}"
        adata = data.client(a, agnostic=True)
        u = client_subspace(adata.normalised(), min(protocol.subspace_dim, len(adata)))
        wire.send(Payload.from_tensors(kind="subspace", round=protocol.rounds, sender=name, receiver="server",
                                       tensors={"U": u}, truth=data.agnostic_clients[a].tolist()))
        k = nearest_cluster(u.double().numpy(), bases, labels)
        gene = protocol.genes.get(k) or []
        names = [n for layer in gene for n in protocol.layer_names[layer]]
        sent = wire.send(Payload.from_tensors(kind="cluster_gene", round=protocol.rounds, sender="server", receiver=name,
                                              tensors={n: clusters[k][n] for n in names}, cluster=k))
        inits = {"learngene": {**theta0, **sent.tensors}, "random": theta0, "cluster_model": clusters[k]}
        if reference is not None:
            inits["fedavg"] = reference
        classes = data.client_classes(a, agnostic=True)
        tune = adata
        if settings.samples and settings.samples < len(adata):
            keep = np.sort(np.random.default_rng([seed, a, 31]).permutation(len(adata))[: settings.samples])
            tune = adata.subset(torch.from_numpy(keep))
        row: dict[str, Any] = {"client": name, "cluster": k, "classes": classes, "gene_layers": gene,
                               "gene_bytes": sent.nbytes, "tuned_on": len(tune)}
        for init_name, state in inits.items():
            local = protocol.fresh(model, state)
            generator = torch.Generator().manual_seed(seed * 7919 + a)
            if settings.epochs:
                local_train(local, tune, epochs=settings.epochs, lr=settings.lr, batch_size=settings.batch_size,
                            generator=generator)
            row[f"accuracy_{init_name}"] = client_accuracy(local, data.test_agnostic, classes)[0]
        rows.append(row)
    means = {key: float(np.mean([r[key] for r in rows])) for key in rows[0] if key.startswith("accuracy_")}
    return {"clients": rows, **means, "fedavg_reference_bytes": fedavg_bytes}
