"""Which recorded payload the attack reads: the victim's message of a given kind."""
from __future__ import annotations

from typing import Any

from privbench.errors import PrivbenchError
from privbench.fl.victim import Victim
from privbench.payloads.capture import CapturePolicy
from privbench.payloads.payload import KINDS, Payload
from privbench.payloads.store import PayloadStore

UPLOADS = ("learngene", "update")


class PayloadChoice:
    """The victim's ``kind`` payload in the victim round (``payload=<kind>`` in the CLI).

    Uplink kinds are those the victim sends; downlink kinds those it receives, except
    ``cluster_model``: the aggregate that the victim's round produced (the cluster model the
    server sends in the next round), attacked against the model it started from, with the
    union of the cluster participants' data as ground truth.
    """

    def __init__(self, *, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"payload.kind={kind!r} is not one of {', '.join(KINDS)}")
        self.kind = kind

    def capture(self, victim: Victim) -> CapturePolicy | None:
        """Extra messages the attack on this kind needs kept, beyond the capture policy."""
        if self.kind != "cluster_model":
            return None
        return CapturePolicy(kinds=frozenset({"cluster_model"}), rounds=frozenset({victim.round + 1}), clients="all")

    def select(self, store: PayloadStore, victim: Victim) -> tuple[Payload, Payload | None]:
        """The chosen payload and the base payload it is relative to (if recorded)."""
        if self.kind == "cluster_model":
            return self._aggregate(store, victim)
        end = "sender" if KINDS[self.kind] == "up" else "receiver"
        found = list(store.records(kind=self.kind, round=victim.round, **{end: victim.name}))
        if not found:
            raise PrivbenchError(f"no {self.kind} payload of {victim.name} in round {victim.round} was recorded")
        payload = store.load(found[0]["id"])
        base = store.load(payload.base) if payload.base else None
        return payload, base

    @staticmethod
    def _aggregate(store: PayloadStore, victim: Victim) -> tuple[Payload, Payload]:
        r = victim.round
        mine = [rec for kind in UPLOADS for rec in store.records(kind=kind, round=r, sender=victim.name)]
        if not mine:
            raise PrivbenchError(f"{victim.name} sent no model upload in round {r}")
        k = mine[0]["cluster"]
        members = [rec for kind in UPLOADS for rec in store.records(kind=kind, round=r, cluster=k)]
        after = [rec for rec in store.records(kind="cluster_model", round=r + 1, cluster=k) if rec["stored"]]
        if not after:
            raise PrivbenchError(f"cluster {k} has no cluster_model in round {r + 1}: no member of it was sampled then, "
                                 f"or fl.rounds <= victim.round + 1; pick another victim.round or seed")
        received = store.load(mine[0]["base"])
        model = store.load(after[0]["id"])
        names = [n for n in model.names if any(n in m["names"] for m in members)]
        parts: list[dict[str, Any]] = []
        truth: list[int] = []
        for m in members:
            parts.append({"images": len(m["truth"]), "num_samples": m["hparams"]["num_samples"],
                          "local_steps": m["hparams"]["local_steps"], "batch_size": m["hparams"]["batch_size"],
                          "names": [n for n in m["names"] if n in names], "client": m["sender"]})
            truth += m["truth"]
        total = sum(p["num_samples"] for p in parts)
        hparams = {**mine[0]["hparams"], "local_steps": round(sum(p["local_steps"] * p["num_samples"] for p in parts) / total),
                   "parts": parts}
        hparams.pop("gene_layers", None)
        hparams.pop("xi", None)
        payload = Payload.from_tensors(kind="cluster_model", round=r + 1, sender="server", receiver=after[0]["receiver"],
                                       tensors={n: model.tensors[n] for n in names}, base=received.id, cluster=k,
                                       hparams=hparams, truth=truth)
        return payload, received
