"""Reads of private data: what a protocol plans to read per client, and how each read was protected."""
from __future__ import annotations

from dataclasses import dataclass

#: The client's local training (every round it participates in).
LOCAL_SGD = "local_sgd"
#: The victim's one-step gradient on its victim batch (the ``gradient`` payload).
AUDIT_GRADIENT = "audit_gradient"
#: GENE-FL's diagonal Fisher at the received model (every round, when ``lambda2 > 0``).
FISHER = "fisher_diagonal"
#: The client's data subspace ``U_i`` sent for clustering (once).
SUBSPACE = "subspace"
#: An agnostic client's fine-tuning; the tuned model stays on the client.
AGNOSTIC_FINETUNE = "agnostic_finetune"
#: GENE-FL's adaptive gamma: the received model's accuracy on the client's data, which sets its upload's size.
GAMMA_SIGNAL = "gamma_signal"
#: Every read a trainer makes (the names a remote client's report may carry).
READS = (LOCAL_SGD, AUDIT_GRADIENT, FISHER, SUBSPACE, AGNOSTIC_FINETUNE, GAMMA_SIGNAL)
#: Reads a DP trainer can protect besides local SGD and the audit gradient.
COVERABLE = (FISHER, SUBSPACE)


@dataclass(frozen=True)
class PlannedRead:
    """One read a client will make, planned before the run (an accounting bound).

    Attributes:
        what: which read (``LOCAL_SGD``, ``AUDIT_GRADIENT``, ``FISHER``, ``SUBSPACE``).
        num_samples: the data the read sees.
        batch_size: the local batch size (``LOCAL_SGD`` only; other reads see all ``num_samples``).
        epochs: passes over the data (``LOCAL_SGD`` only).

    Example:
        >>> PlannedRead(LOCAL_SGD, num_samples=100, batch_size=32, epochs=2).batches
        4
    """

    what: str
    num_samples: int
    batch_size: int | None = None
    epochs: int = 1

    @property
    def batches(self) -> int:
        """Batches per epoch: ``ceil(num_samples / batch_size)`` (1 for a whole-data read)."""
        if self.batch_size is None:
            return 1
        return -(-self.num_samples // self.batch_size)


@dataclass(frozen=True)
class Read:
    """How a read of private data was protected.

    Attributes:
        what: which read.
        mechanism: the mechanism applied before anything derived from it left the client.
        covered: whether the read is accounted in the reported epsilon (or releases nothing).
    """

    what: str
    mechanism: str
    covered: bool

    def as_dict(self) -> dict[str, str | bool]:
        return {"what": self.what, "mechanism": self.mechanism, "covered": self.covered}
