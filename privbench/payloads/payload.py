"""Payload: one message on the wire, as named tensors plus what the attacker may know of it."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from privbench.payloads.kinds import Direction, PayloadKind
from privbench.payloads.kinds import kind as kind_spec
from privbench.payloads.training import Condensation, LocalTraining

Phase = Literal["training", "agnostic"]
#: Protocol phases a message can belong to: the federated rounds, or agnostic clients joining.
PHASES: tuple[Phase, ...] = ("training", "agnostic")


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
        kind: one of ``privbench.payloads.KINDS`` (e.g. ``"gradient"``, ``"update"``).
        round: federated round the message belongs to.
        sender: ``"server"`` or ``"client<i>"``.
        receiver: ``"server"`` or ``"client<i>"``.
        names: parameter names present, in the model's order.
        shapes: shape of each named tensor.
        dtypes: dtype of each named tensor, e.g. ``"float32"``.
        nbytes: exact size of the tensors on the wire.
        base: id of the payload this one is relative to (the model the client started from).
        cluster: cluster index for clustered protocols, else None.
        phase: ``training`` (the federated rounds) or ``agnostic`` (agnostic clients joining).
        training: how the sender trained before sending (client uploads and aggregates).
        condensation: the gene layers chosen and their scores (GENE-FL uploads).
        protection: what a message transform did to the tensors (e.g. the noise added to
            what), or None when sent as computed.
        encoding: how a compressing transform encoded the tensors (``privbench.payloads.encoding``: ``sparse/change``,
            ``quantized:4/values``, ...), or None when they go as named tensors.
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
    phase: Phase = "training"
    training: LocalTraining | None = None
    condensation: Condensation | None = None
    protection: str | None = None
    encoding: str | None = None
    tensors: dict[str, torch.Tensor] | None = field(default=None, repr=False)

    @classmethod
    def from_tensors(cls, *, kind: str, round: int, sender: str, receiver: str, tensors: dict[str, torch.Tensor],
                     base: str | None = None, cluster: int | None = None, phase: Phase = "training",
                     training: LocalTraining | None = None,
                     condensation: Condensation | None = None) -> "Payload":
        """Build a payload from named tensors (detached, on CPU) and count its bytes.

        Example:
            >>> p = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server",
            ...                          tensors={"w": torch.zeros(2, 3)})
            >>> p.id, p.nbytes, p.direction
            ('r0000-gradient-client0-server', 24, 'up')
        """
        spec = kind_spec(kind)
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; allowed: {', '.join(PHASES)}")
        tensors = {name: t.detach().to("cpu").contiguous() for name, t in tensors.items()}
        return cls(kind=spec.name, round=round, sender=sender, receiver=receiver, names=list(tensors),
                   shapes={n: list(t.shape) for n, t in tensors.items()},
                   dtypes={n: str(t.dtype).removeprefix("torch.") for n, t in tensors.items()},
                   nbytes=tensor_bytes(tensors), base=base, cluster=cluster, phase=phase, training=training,
                   condensation=condensation, tensors=tensors)

    def with_tensors(self, tensors: dict[str, torch.Tensor], *, protection: str | None = None) -> "Payload":
        """The same message carrying ``tensors`` instead: names, shapes, dtypes and bytes recounted from them
        (a transform that changes what is sent changes what it costs). ``protection`` notes what changed.

        Example:
            >>> p = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server",
            ...                          tensors={"w": torch.zeros(2, 3)})
            >>> p.with_tensors({"w": torch.zeros(2, 3, dtype=torch.float16)}, protection="half").nbytes
            12
        """
        tensors = {name: t.detach().to("cpu").contiguous() for name, t in tensors.items()}
        return dataclasses.replace(self, names=list(tensors), shapes={n: list(t.shape) for n, t in tensors.items()},
                                   dtypes={n: str(t.dtype).removeprefix("torch.") for n, t in tensors.items()},
                                   nbytes=tensor_bytes(tensors), tensors=tensors,
                                   protection=self.protection if protection is None else protection)

    def check_bytes(self) -> None:
        """Raise ``ValueError`` when the declared names, shapes, dtypes or bytes are not those of the tensors."""
        if self.tensors is None:
            return
        t = self.tensors
        declared = (self.names, self.shapes, self.dtypes, self.nbytes)
        actual = (list(t), {n: list(v.shape) for n, v in t.items()},
                  {n: str(v.dtype).removeprefix("torch.") for n, v in t.items()}, tensor_bytes(t))
        if declared != actual:
            raise ValueError(f"{self.id}: declares {self.nbytes} bytes in {self.names}, carries {actual[3]} in "
                             f"{actual[0]} (a transform must send payload.with_tensors(...))")

    @property
    def id(self) -> str:
        """Unique name within a run, e.g. ``r0002-update-client3-server``."""
        return f"r{self.round:04d}-{self.kind}-{self.sender}-{self.receiver}"

    @property
    def spec(self) -> PayloadKind:
        """What this kind of message is (``privbench.payloads.kinds``)."""
        return kind_spec(self.kind)

    @property
    def direction(self) -> Direction:
        """``"up"`` (client to server) or ``"down"``."""
        return self.spec.direction

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
        out = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "tensors"}
        out["training"] = self.training.to_dict() if self.training else None
        out["condensation"] = self.condensation.to_dict() if self.condensation else None
        out["id"] = self.id
        out["direction"] = self.direction
        out["stored"] = self.tensors is not None
        return out

    @classmethod
    def from_record(cls, record: dict[str, Any], tensors: dict[str, torch.Tensor] | None = None) -> "Payload":
        """The payload ``record()`` described, with ``tensors`` if given."""
        fields = {k: v for k, v in record.items() if k in cls.__dataclass_fields__ and k != "tensors"}
        if fields.get("training") is not None:
            fields["training"] = LocalTraining.from_dict(fields["training"])
        if fields.get("condensation") is not None:
            fields["condensation"] = Condensation.from_dict(fields["condensation"])
        return cls(**fields, tensors=tensors)
