"""What an active server holds: the download it crafted and the victim's reply."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from privbench.payloads import LocalTraining


@dataclass
class ActiveView:
    """An active server's round: the download it crafted and the victim's reply, trained as usual on it.

    Attributes:
        sent: the crafted download's state (what the victim received).
        observed: the reply as the server reads it: a gradient's tensors, or a model's change from ``sent``.
        reply_kind: the reply's payload kind (``gradient``, ``update``).
        training: the victim's declared training of the reply.
        image_shape: ``(C, H, W)`` of one input.
        mean: per-channel input mean of the model's input space.
        std: per-channel input std.
        crafted_layer: the layer the attack crafted (``privbench.fl.layers`` names), which its read needs.
        knowledge: the threat-model declaration (what the server changed, what it was sent back).
        client_check: what the victim's own check of the download found (``defenses.detector``; the
            evaluator's figure, which the attack does not read).
        target: the evaluator's truth of a server that isolated one member of a secure aggregate: that member's
            train images (None: the message's own images are the truth); the evaluator's field, which no attack
            reads.
        owners: with per-client downloads, the member each image of ``target`` belongs to (the evaluator's field).
    """

    sent: dict[str, torch.Tensor]
    observed: dict[str, torch.Tensor]
    reply_kind: str
    training: LocalTraining | None
    image_shape: tuple[int, int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    crafted_layer: str
    knowledge: dict[str, Any] = field(default_factory=dict)
    client_check: dict[str, Any] = field(default_factory=dict)
    target: list[int] | None = None
    owners: list[str] | None = None
