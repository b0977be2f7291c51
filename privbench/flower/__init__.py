"""privbench on Flower: a ServerApp and ClientApps that run the same protocols, every message captured."""
import os

# Flower and Ray report usage to their makers, and Flower's commands check for updates, unless told not to; privbench
# never needs the network.
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")  # flwr, flower-superlink and flower-supernode ask its server
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # silences a FutureWarning; no GPU is given to clients
