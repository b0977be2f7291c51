"""privbench: a privacy testbed for GENE-FL and federated baselines."""

__version__ = "0.1.0"
