"""Utility and bytes figures: accuracy of the known and agnostic clients, clustering, bytes on the wire."""
from __future__ import annotations

from privbench.figures.spec import Figure

ACCURACY = Figure("accuracy", "utility", "known-client accuracy", fmt="{:.3f}", bounds="unit")
DOWNLOADED_ACCURACY = Figure("downloaded_accuracy", "utility", "downloaded-model accuracy", fmt="{:.3f}", bounds="unit")
GLOBAL_ACCURACY = Figure("global_accuracy", "utility", "global-model accuracy", fmt="{:.3f}", bounds="unit")
PERSONAL_ACCURACY = Figure("personal_accuracy", "utility", "own-model accuracy", fmt="{:.3f}", bounds="unit")
CLUSTER_RAND_INDEX = Figure("cluster_rand_index", "utility", "clusters vs class sets (Rand)", fmt="{:.3f}",
                            bounds="unit")
AGNOSTIC_ACCURACY = Figure("agnostic_accuracy_learngene", "utility", "agnostic accuracy", fmt="{:.3f}", bounds="unit")
UPLINK_BYTES = Figure("uplink_bytes", "bytes", "uplink (B)", unit="B", fmt="{:,.0f}", bounds="nonnegative")
DOWNLINK_BYTES = Figure("downlink_bytes", "bytes", "downlink (B)", unit="B", fmt="{:,.0f}", bounds="nonnegative")
TOTAL_BYTES = Figure("total_bytes", "bytes", "total (B)", unit="B", fmt="{:,.0f}", bounds="nonnegative")
TOTAL_RATIO = Figure("total_ratio", "bytes", "total bytes vs FedAvg", fmt="{:.3f}", bounds="nonnegative")
