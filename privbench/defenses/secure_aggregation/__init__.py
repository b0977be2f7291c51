"""Secure aggregation: the server learns each cohort's sum, never an upload (SecAgg+, in this process)."""
from privbench.defenses.secure_aggregation.secaggplus import SecAggPlus

__all__ = ["SecAggPlus"]
