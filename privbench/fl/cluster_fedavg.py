"""Cluster-FedAvg baseline: GENE-FL's clusters, but full-model local training and averaging."""
from __future__ import annotations

from privbench.fl.clustered import ClusteredProtocol
from privbench.fl.learngene import layers
from privbench.fl.local import parameters_of
from privbench.payloads import Payload


class ClusterFedAvg(ClusteredProtocol):
    """FedAvg inside each subspace cluster: ``cluster_model`` down, ``update`` (full model) up."""

    name = "cluster_fedavg"
    emits = ("subspace", "cluster_model", "update", "gradient", "cluster_gene")

    def run(self, *, model, data, victim, wire, seed):
        self.layer_names = layers(model)
        return super().run(model=model, data=data, victim=victim, wire=wire, seed=seed)

    def after_aggregation(self, k, uploaded_layers):
        self.genes[k] = list(self.layer_names)  # the whole model is the shared knowledge

    def client_round(self, model, received, data, c, k, r, victim, wire, seed):
        name = f"client{c}"
        base_id = f"r{r:04d}-cluster_model-server-{name}"
        local = self.fresh(model, received)
        client_data, truth = data.client(c), data.clients[c]
        if (c, r) == (victim.client, victim.round):
            _, client_data, truth = self.victim_gradient(local, client_data, truth, c, r, victim, wire, base_id, seed)
        steps = self.local_update(local, client_data, client=c, round_=r, seed=seed)
        up = wire.send(Payload.from_tensors(
            kind="update", round=r, sender=name, receiver="server", tensors=parameters_of(local), base=base_id, cluster=k,
            hparams={**self.hparams(), "local_steps": steps, "num_samples": len(client_data)}, truth=truth.tolist(),
        ))
        return len(client_data), up.tensors, list(self.layer_names)
