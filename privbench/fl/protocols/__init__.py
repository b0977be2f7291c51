"""Federated protocols, one per module: FedAvg, GENE-FL, cluster-FedAvg, local-only."""
from privbench.fl.protocols.base import FederatedProtocol
from privbench.fl.protocols.cluster_fedavg import ClusterFedAvg
from privbench.fl.protocols.fedavg import FedAvg
from privbench.fl.protocols.genefl import GeneFL
from privbench.fl.protocols.local_only import LocalOnly
from privbench.fl.protocols.result import Clustering, ProtocolResult, RoundRecord
from privbench.fl.protocols.round import ClientRound

__all__ = ["ClientRound", "ClusterFedAvg", "Clustering", "FedAvg", "FederatedProtocol", "GeneFL", "LocalOnly",
           "ProtocolResult", "RoundRecord"]
