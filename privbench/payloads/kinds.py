"""The payload kinds: one spec per kind, from which every list of kinds in privbench derives."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["up", "down"]
#: What a kind carries: a gradient, model parameters, a data-subspace basis, or secure aggregation's key
#: material and masked vectors (``secret``: nothing an attack reads, and no message transform touches).
Carries = Literal["gradient", "model", "basis", "secret"]




@dataclass(frozen=True)
class PayloadKind:
    """What one kind of message is, and how an attacker may use it.

    Attributes:
        name: the kind's name (``payload=<name>`` in the CLI).
        direction: ``up`` (client to server) or ``down``.
        carries: ``gradient``, ``model``, ``basis`` or ``secret``.
        aggregate: made by the server from several clients' uploads.
        base: the message it is relative to (the model the sender started from), or None.
        audit_only: recorded for the audit (a FedSGD worst case), not protocol traffic.
        once: sent once, before round 0's training (so it is attacked there whatever the victim round).
        readable: whether an attack can rebuild private data from it; ``unreadable_why``
            says why not otherwise.
        doc: one line for the glossary.
    """

    name: str
    direction: Direction
    carries: Carries
    doc: str
    aggregate: bool = False
    base: str | None = None
    audit_only: bool = False
    once: bool = False
    readable: bool = True
    unreadable_why: str = ""

    @property
    def client_own(self) -> bool:
        """A client's own upload or gradient (what secure aggregation holds back from the server)."""
        return self.direction == "up" and self.carries in ("model", "gradient") and not self.aggregate

    @property
    def reads_as(self) -> Carries | None:
        """What an attack reads this kind as (``None``: no attack applies)."""
        return self.carries if self.readable else None


def _secret(name: str, direction: Direction, doc: str,
            why: str = "key material of secure aggregation, not data; attack payload=aggregate") -> PayloadKind:
    """A kind of secure aggregation's (key material, shares, masked vectors): no attack reads it."""
    return PayloadKind(name, direction, "secret", doc, readable=False, unreadable_why=why)


_SPECS = (
    PayloadKind("gradient", "up", "gradient", "one local step's gradient on the victim batch, all layers (FedSGD)",
                base="the model the client received", audit_only=True),
    PayloadKind("gene_gradient", "up", "gradient", "the victim gradient restricted to the client's gene layers",
                base="the model the client received", audit_only=True),
    PayloadKind("learngene", "up", "model", "GENE-FL's upload: the gene layers after the local epochs",
                base="the model the client received"),
    PayloadKind("update", "up", "model", "FedAvg's upload: the full model after local training",
                base="the model the client received"),
    PayloadKind("subspace", "up", "basis", "the client's top-d left singular vectors, sent once for clustering",
                once=True),
    PayloadKind("cluster_model", "down", "model", "a cluster's model after aggregating its clients' uploads",
                aggregate=True, base="the cluster model of the round before"),
    PayloadKind("global_model", "down", "model", "FedAvg's global model", aggregate=True, readable=False,
                unreadable_why="a server-made model carries no client gradient; attack the next round's aggregate "
                               "with payload=cluster_model or the client's upload"),
    PayloadKind("cluster_gene", "down", "model", "a cluster's learnGene layers, sent to an agnostic client",
                aggregate=True, readable=False,
                unreadable_why="a server-made model carries no client gradient"),
    PayloadKind("aggregate", "up", "model", "under secure aggregation, the server's only view of a round's uploads: "
                "their weighted mean per cohort (a FedAvg round, a cluster), as it unmasks it", aggregate=True,
                base="the model the cohort received", audit_only=True),
    _secret("secagg_public_keys", "up", "SecAgg+ setup: a client's two X25519 public keys"),
    _secret("secagg_neighbour_keys", "down", "SecAgg+ share keys: the public keys of a client's neighbours"),
    _secret("secagg_key_shares", "up", "SecAgg+ share keys: Shamir shares of a client's mask seed and mask key, "
            "encrypted to each neighbour"),
    _secret("secagg_forwarded_shares", "down", "SecAgg+: the encrypted shares the server forwards to a client"),
    _secret("masked_upload", "up", "SecAgg+ collect masked vectors: a client's quantised upload plus its masks, "
            "mod 2^32", "a masked vector is uniform to anyone without its masks; attack payload=aggregate"),
    _secret("secagg_unmask_request", "down", "SecAgg+ unmask: which clients survived the round"),
    _secret("secagg_unmask_shares", "up", "SecAgg+ unmask: a client's shares of its neighbours' mask seeds"),
)

#: Every payload kind by name, in wire order (uploads first).
KINDS: dict[str, PayloadKind] = {spec.name: spec for spec in _SPECS}


def kind(name: str) -> PayloadKind:
    """The spec of payload kind ``name``.

    Raises:
        ValueError: ``name`` is not a payload kind (the message lists them).

    Example:
        >>> kind("learngene").direction, kind("learngene").carries
        ('up', 'model')
    """
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown payload kind {name!r}; allowed: {', '.join(KINDS)}") from None


def kinds_where(*, direction: Direction | None = None, carries: Carries | None = None,
                audit_only: bool | None = None, readable: bool | None = None,
                aggregate: bool | None = None) -> tuple[str, ...]:
    """Names of the kinds whose spec matches every given field.

    Example:
        >>> kinds_where(audit_only=True, aggregate=False)
        ('gradient', 'gene_gradient')
    """
    return tuple(s.name for s in _SPECS
                 if (direction is None or s.direction == direction) and (carries is None or s.carries == carries)
                 and (audit_only is None or s.audit_only == audit_only)
                 and (readable is None or s.readable == readable)
                 and (aggregate is None or s.aggregate == aggregate))
