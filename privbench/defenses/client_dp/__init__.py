"""Client-level differential privacy: DP-FedAvg around each cohort's aggregation, its accountant, and canary
clients that measure it in the same run."""
from privbench.defenses.client_dp.mechanism import DPFedAvg
from privbench.defenses.client_dp.secure import SecureDPFedAvg

__all__ = ["DPFedAvg", "SecureDPFedAvg"]
