"""Cluster-FedAvg baseline: GENE-FL's clusters, but full-model local training and averaging."""
from __future__ import annotations

from torch import nn

from privbench.data import FederatedData
from privbench.fl.protocols.base import ClientRound
from privbench.fl.protocols.clustered import ClusteredProtocol, ClusterRun, Upload
from privbench.fl.sgd import State, model_with, parameters_of
from privbench.payloads import Payload


class ClusterFedAvg(ClusteredProtocol):
    """FedAvg inside each subspace cluster: ``cluster_model`` down, ``update`` (full model) up."""

    name = "cluster_fedavg"
    sends = ("subspace", "cluster_model", "update", "gradient", "cluster_gene")

    def after_aggregation(self, state: ClusterRun, k: int, uploaded_layers: list[list[str]]) -> None:
        state.genes[k] = list(state.layers)  # the whole model is the shared knowledge

    def client_round(self, model: nn.Module, received: State, data: FederatedData, state: ClusterRun,
                     at: ClientRound) -> Upload:
        base_id = f"r{at.round:04d}-cluster_model-server-{at.name}"
        local = model_with(model, received)
        client_data, truth = data.client(at.client), data.clients[at.client]
        if at.is_victim:
            step = self.victim_gradient(local, client_data, truth, at=at, base_id=base_id)
            client_data, truth = step.data, step.truth
        training = self.local_update(local, client_data, at=at)
        state.personal[at.client] = after = parameters_of(local)
        up = at.wire.send(Payload.from_tensors(
            kind="update", round=at.round, sender=at.name, receiver="server", tensors=after, base=base_id,
            cluster=at.cluster, training=training, truth=truth.tolist()))
        assert up.tensors is not None
        return Upload(len(client_data), up.tensors, list(state.layers))
