"""The evaluator's agnostic-client experiment: each agnostic client joins a clustered run and is scored from
several initialisations at the same fine-tuning budget."""
from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from privbench.data import FederatedData
from privbench.fl.clustering.agnostic import AgnosticSettings, finetuned_accuracy, tune_set
from privbench.fl.clustering.subspace import nearest_cluster
from privbench.fl.engine import ClientSide, ClientTask, Engine, InProcess
from privbench.fl.protocols import ProtocolResult
from privbench.fl.protocols.clustered import ClusteredProtocol
from privbench.fl.reads import AGNOSTIC_FINETUNE
from privbench.fl.sgd import State
from privbench.fl.wire import Wire
from privbench.payloads import Payload
from privbench.victim import Victim


def evaluate_agnostic(result: ProtocolResult, *, protocol: ClusteredProtocol, round_: int, model: nn.Module,
                      data: FederatedData, wire: Wire, seed: int, reference: State | None = None,
                      engine: Engine | None = None, victim: Victim | None = None) -> dict[str, Any]:
    """Score each agnostic client's fine-tuned accuracy from several initialisations.

    Each agnostic client sends its subspace (the ``subspace`` task), is matched to the nearest
    cluster ``k`` of ``result.clustering``, receives only the cluster learnGene
    (``cluster_gene``), starts from ``[theta_0 ; Theta_k^G]`` and fine-tunes (the
    ``agnostic_tune`` task, on ``engine``: in this process, or on its Flower SuperNode). The
    same fine-tuning budget (plain SGD: nothing is sent afterwards) is applied here, as the
    evaluator's counterfactuals, to ``random`` (``theta_0``), ``cluster_model`` (``Theta_k``)
    and, when ``reference`` is given, ``fedavg`` (a FedAvg global model trained with the same
    budget). Accuracy is on the agnostic test images of the client's own classes. Messages are
    sent in the ``agnostic`` phase as round ``round_``. The subspace goes through the
    protocol's trainer (DP-PCA when a DP trainer covers it); the fine-tuned models stay on the clients.
    """
    engine = engine or InProcess()
    settings: AgnosticSettings = protocol.agnostic
    clustering = result.clustering
    if clustering is None:
        raise ValueError("agnostic clients need a clustered protocol's result")
    side = ClientSide(model, data, None, wire, seed, victim or Victim(), result.theta0)
    labels = np.array(clustering.labels)
    rows = []
    for a in range(len(data.agnostic_clients)):
        name = f"agnostic{a}"
        reply, = engine.run(protocol, [ClientTask("subspace", a, round_, agnostic=True)], side)
        k = nearest_cluster(protocol.basis(reply), list(clustering.bases), labels, variant=protocol.subspace)
        gene = engine.downlink_wire(wire).send(Payload.from_tensors(
            kind="cluster_gene", round=round_, sender="server", receiver=name,
            tensors={n: clustering.models[k][n] for n in clustering.gene_names(k)}, cluster=k, phase="agnostic"))
        protocol.trainer.declare_read(AGNOSTIC_FINETUNE, mechanism="kept on the client: nothing is sent",
                                      covered=True)
        row: dict[str, Any] = {"client": name, "cluster": k, "classes": data.client_classes(a, agnostic=True),
                               "gene_layers": list(clustering.genes.get(k, ())), "gene_bytes": gene.nbytes,
                               "tuned_on": len(tune_set(data, a, settings, seed=seed))}
        tuned, = engine.run(protocol, [ClientTask("agnostic_tune", a, round_, (gene,), agnostic=True)], side)
        row["accuracy_learngene"] = float(tuned.fields["tuned_accuracy"])
        inits = {"random": result.theta0, "cluster_model": clustering.models[k]}
        if reference is not None:
            inits["fedavg"] = reference
        for init_name, state in inits.items():
            row[f"accuracy_{init_name}"] = finetuned_accuracy(model, state, data, a, settings, seed=seed)
        rows.append(row)
    means = {key: float(np.mean([r[key] for r in rows])) for key in rows[0] if key.startswith("accuracy_")}
    return {"clients": rows, **means}
