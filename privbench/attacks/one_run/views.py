"""What the one-run auditor holds: the victim's model change and the canaries it designed."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass
class CanaryView:
    """A one-run DP audit's round: the victim's model change as the server sees it, and the ``m`` canaries the
    auditor designed, of which the victim's training included each with probability 1/2: Dirac gradient canaries
    (one coordinate each) or input-space canaries (mislabelled images, with the model the victim started from).

    Attributes:
        change: the uploaded model's change from its download, by name.
        coordinates: every Dirac canary's (parameter name, flat index); which were included is the evaluator's.
        knowledge: the threat-model declaration (the canaries, the round's DP parameters, the claimed epsilon).
        model: input-space canaries: the model at the download the victim started from.
        images: input-space canaries: the canary images, normalised as the model's input.
        labels: input-space canaries: their (wrong) labels.
    """

    change: dict[str, torch.Tensor]
    coordinates: list[tuple[str, int]]
    knowledge: dict[str, Any] = field(default_factory=dict)
    model: nn.Module | None = None
    images: torch.Tensor | None = None
    labels: torch.Tensor | None = None
