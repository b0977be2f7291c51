"""What a federated run ends with: one record per round, the clustering (clustered protocols) and the result."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privbench.figures import ACCURACY, GLOBAL_ACCURACY, PERSONAL_ACCURACY
from privbench.fl.layers import state_names
from privbench.fl.sgd import State
from privbench.fl.wire import Totals


@dataclass(frozen=True)
class RoundRecord:
    """Known-client accuracy and protocol bytes so far, after one round."""

    round: int
    accuracy: float
    totals: Totals
    global_accuracy: float | None = None
    personal_accuracy: float | None = None

    def as_dict(self) -> dict[str, float | int | None]:
        """JSON-ready fields (``global_accuracy``, ``personal_accuracy`` only where measured)."""
        out: dict[str, float | int | None] = {"round": self.round, ACCURACY.key: self.accuracy}
        if self.global_accuracy is not None:
            out[GLOBAL_ACCURACY.key] = self.global_accuracy
        if self.personal_accuracy is not None:
            out[PERSONAL_ACCURACY.key] = self.personal_accuracy
        return {**out, **self.totals.as_dict()}


@dataclass(frozen=True)
class Clustering:
    """What a clustered protocol ends with: clusters, their models and learnGenes.

    Attributes:
        labels: each known client's cluster.
        bases: each known client's subspace basis ``U_i`` (as the server received it).
        models: each cluster's final model ``Theta_k``.
        genes: each cluster's learnGene layers ``Theta_k^G`` (layer names).
        layers: the model's layers and their state names.
    """

    labels: tuple[int, ...]
    bases: tuple[np.ndarray, ...]
    models: dict[int, State]
    genes: dict[int, tuple[str, ...]]
    layers: dict[str, list[str]]

    def gene_names(self, k: int) -> list[str]:
        """State names of cluster ``k``'s learnGene."""
        return state_names(self.layers, self.genes.get(k, ()))


@dataclass(frozen=True)
class ProtocolResult:
    """Outcome of a federated run.

    Attributes:
        theta0: the shared initialisation.
        final: the model the victim ends with (global, cluster or own model).
        accuracy: known-client accuracy: each known client's model on the test images of
            its own classes, pooled over those images.
        client_accuracy: each known client's accuracy on its own classes.
        history: one record per round.
        global_accuracy: the global model's accuracy on all known classes (FedAvg only).
        clustering: clusters, cluster models and learnGenes (clustered protocols only).
        personal_accuracy: known-client accuracy of each client's own model after its latest local
            training (local-only; FedAvg in process; clustered protocols with ``fl.eval`` personal or both);
            a client that never trained is scored on the model it would download.
        personal_client_accuracy: each client's own-model accuracy (``fl.eval=both``).
        downloaded_accuracy: known-client accuracy of the model each client holds after its download
            (FedAvg's global model, a cluster model; under GENE-FL's ``downlink=gene`` its own model
            with the cluster's gene layers); None where nothing is downloaded (local-only).
    """

    theta0: State
    final: State
    accuracy: float
    client_accuracy: dict[int, float]
    history: tuple[RoundRecord, ...]
    global_accuracy: float | None = None
    clustering: Clustering | None = None
    personal_accuracy: float | None = None
    personal_client_accuracy: dict[int, float] | None = None
    downloaded_accuracy: float | None = None
