"""Payload: one message on the wire, as named tensors plus what the attacker may know of it."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

KINDS = {
    "gradient": "up",
    "gene_gradient": "up",
    "learngene": "up",
    "update": "up",
    "subspace": "up",
    "cluster_model": "down",
    "global_model": "down",
    "cluster_gene": "down",
}

#: Messages that exist only for the audit (FedSGD worst-case gradients), not protocol traffic.
AUDIT_ONLY = ("gradient", "gene_gradient")


def tensor_bytes(tensors: dict[str, torch.Tensor]) -> int:
    """Exact wire size: sum of element count x element size.

    Example:
        >>> tensor_bytes({"w": torch.zeros(3, 4), "b": torch.zeros(4, dtype=torch.float16)})
        56
    """
    return sum(t.numel() * t.element_size() for t in tensors.values())


@dataclass
class Payload:
    """A message that crosses the wire.

    Attributes:
        kind: one of ``KINDS`` (e.g. ``"gradient"``, ``"update"``, ``"global_model"``).
        round: federated round the message belongs to.
        sender: ``"server"`` or ``"client<i>"``.
        receiver: ``"server"`` or ``"client<i>"``.
        names: parameter names present, in the model's order.
        shapes: shape of each named tensor.
        dtypes: dtype of each named tensor, e.g. ``"float32"``.
        nbytes: exact size of the tensors on the wire.
        base: id of the payload this one is relative to (the model the client started from).
        cluster: cluster index for clustered protocols, else None.
        hparams: local hyper-parameters of the sender (lr, local_steps, batch_size, epochs).
        truth: indices of the private training samples the message was computed from; the
            evaluator's ground truth, never given to an attack.
        tensors: the named tensors, or None when the capture policy did not keep them.
    """

    kind: str
    round: int
    sender: str
    receiver: str
    names: list[str]
    shapes: dict[str, list[int]]
    dtypes: dict[str, str]
    nbytes: int
    base: str | None = None
    cluster: int | None = None
    hparams: dict[str, Any] = field(default_factory=dict)
    truth: list[int] = field(default_factory=list)
    tensors: dict[str, torch.Tensor] | None = field(default=None, repr=False)

    @classmethod
    def from_tensors(cls, *, kind: str, round: int, sender: str, receiver: str, tensors: dict[str, torch.Tensor], **meta: Any) -> "Payload":
        """Build a payload from named tensors (detached, on CPU) and count its bytes."""
        if kind not in KINDS:
            raise ValueError(f"unknown payload kind {kind!r}; allowed: {', '.join(KINDS)}")
        tensors = {name: t.detach().to("cpu").contiguous() for name, t in tensors.items()}
        return cls(
            kind=kind,
            round=round,
            sender=sender,
            receiver=receiver,
            names=list(tensors),
            shapes={n: list(t.shape) for n, t in tensors.items()},
            dtypes={n: str(t.dtype).removeprefix("torch.") for n, t in tensors.items()},
            nbytes=tensor_bytes(tensors),
            tensors=tensors,
            **meta,
        )

    @property
    def id(self) -> str:
        """Unique name within a run, e.g. ``r0002-update-client3-server``."""
        return f"r{self.round:04d}-{self.kind}-{self.sender}-{self.receiver}"

    @property
    def direction(self) -> str:
        """``"up"`` (client to server) or ``"down"``."""
        return KINDS[self.kind]

    @property
    def numel(self) -> int:
        """Number of scalars carried."""
        total = 0
        for shape in self.shapes.values():
            n = 1
            for s in shape:
                n *= s
            total += n
        return total

    def record(self) -> dict[str, Any]:
        """JSON-ready metadata (everything but the tensors)."""
        out = asdict(self)
        out.pop("tensors")
        out["id"] = self.id
        out["direction"] = self.direction
        out["stored"] = self.tensors is not None
        return out
