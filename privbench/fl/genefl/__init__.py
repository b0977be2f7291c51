"""GENE-FL's parts: subspace clustering, the Fisher diagonal, learnGene condensation, agnostic clients."""
