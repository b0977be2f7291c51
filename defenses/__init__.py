"""Defences in two shapes: message transforms (noise, prune) on what is sent, trainers (DP-SGD) inside training."""
from privbench.defenses.dpsgd import DPSGD
from privbench.defenses.noise import GaussianNoise
from privbench.defenses.none import NoDefense
from privbench.defenses.prune import Prune
from privbench.fl.trainer import Trainer
from privbench.payloads.transform import MessageTransform

__all__ = ["DPSGD", "GaussianNoise", "MessageTransform", "NoDefense", "Prune", "Trainer"]
