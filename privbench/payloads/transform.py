"""Message transforms: defences the wire applies to each uplink payload before it is sent."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from privbench.payloads.payload import Payload


class MessageTransform(ABC):
    """A defence applied by the wire to every uplink payload before it is recorded and sent.

    Subclasses set ``name`` and implement ``protect`` and ``describe``. A defence that acts
    inside local training (DP-SGD) is a ``privbench.fl.trainer.Trainer`` instead.
    """

    name = "transform"
    #: it sends an encoded form (``privbench.payloads.encoding``), which readers decode.
    encodes = False

    @abstractmethod
    def protect(self, payload: Payload, base: dict[str, torch.Tensor] | None = None) -> Payload:
        """The payload as sent; ``base`` is the model the sender received (for model uploads)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Settings recorded with the results."""
