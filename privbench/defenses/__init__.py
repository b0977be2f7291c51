"""Defences in three shapes: message transforms (noise, prune) on what is sent, trainers (DP-SGD) inside training,
and cohort aggregations around a round's uploads (secure aggregation, ``secure_aggregation``)."""
from privbench.defenses.dpsgd import DPSGD
from privbench.defenses.noise import GaussianNoise
from privbench.defenses.none import NoDefense
from privbench.defenses.prune import Prune
from privbench.fl.trainer import Trainer
from privbench.payloads.transform import MessageTransform

__all__ = ["DPSGD", "GaussianNoise", "MessageTransform", "NoDefense", "Prune", "Trainer"]
