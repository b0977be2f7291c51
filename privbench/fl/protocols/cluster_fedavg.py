"""Cluster-FedAvg baseline: GENE-FL's clusters, but full-model local training and averaging."""
from __future__ import annotations

from privbench.fl.engine import ClientSide
from privbench.fl.layers import layers
from privbench.fl.protocols.clustered import ClusteredProtocol, ClusterRun
from privbench.fl.protocols.round import PendingUpload, Upload
from privbench.fl.sgd import parameters_of
from privbench.payloads import LocalTraining, Payload


class ClusterFedAvg(ClusteredProtocol):
    """FedAvg inside each subspace cluster: ``cluster_model`` down, ``update`` (full model) up."""

    name = "cluster_fedavg"
    sends = ("subspace", "cluster_model", "update", "gradient", "cluster_gene")

    def after_aggregation(self, state: ClusterRun, k: int, uploaded_layers: list[list[str]]) -> None:
        state.genes[k] = list(state.layers)  # the whole model is the shared knowledge

    def upload_layers(self, upload: Payload | None, side: ClientSide) -> list[str]:
        """Every layer of the model: its update is the whole model."""
        return list(layers(side.model))

    def end_round(self, pending: PendingUpload, training: LocalTraining, state: ClusterRun) -> Upload:
        at = pending.at
        state.personal[at.client] = after = parameters_of(pending.job.model)
        up = at.wire.send(Payload.from_tensors(
            kind="update", round=at.round, sender=at.name, receiver="server", tensors=after, base=pending.base_id,
            cluster=at.cluster, training=training), truth=pending.truth.tolist())
        return Upload(len(pending.job.data), up, list(state.layers))
