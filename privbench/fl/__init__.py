"""Federated learning: protocols (``protocols/``), GENE-FL's parts (``genefl/``), and the shared machinery here."""
