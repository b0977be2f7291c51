"""One-shot subspace clustering and agnostic clients: shared by GENE-FL and cluster-FedAvg."""
