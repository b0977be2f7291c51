"""Which recorded payload the attack reads: the victim's message of a given kind."""
from __future__ import annotations

from privbench.errors import ConfigError, PrivbenchError
from privbench.payloads.capture import CapturePolicy
from privbench.payloads.encoding import decode, plain_name
from privbench.payloads.kinds import PayloadKind, kinds_where
from privbench.payloads.kinds import kind as kind_spec
from privbench.payloads.payload import Payload
from privbench.payloads.store import PayloadStore
from privbench.payloads.training import AggregatePart, LocalTraining
from privbench.victim import Victim


class PayloadChoice:
    """The victim's ``kind`` payload in the victim round (``payload=<kind>`` in the CLI).

    Uplink kinds are those the victim sends; downlink kinds those it receives, except
    aggregates (``cluster_model``): the aggregate that the victim's round produced (the
    cluster model the server sends in the next round), attacked against the model the victim
    started from, with the union of the cluster participants' data as ground truth.

    Example:
        >>> PayloadChoice(kind="learngene").spec.direction
        'up'
    """

    def __init__(self, *, kind: str) -> None:
        try:
            self.spec: PayloadKind = kind_spec(kind)
        except ValueError as exc:
            raise ConfigError(f"payload.kind: {exc}") from None
        self.kind = kind

    def capture(self, victim: Victim) -> CapturePolicy:
        """The messages the attack on this kind reads, kept whatever ``capture`` says (it only adds more)."""
        clients = "all" if victim.clients == "all" else frozenset(victim.listed)
        if self.spec.once:
            return CapturePolicy(kinds=frozenset({self.kind}), rounds=frozenset({0}), clients=clients)
        if not (self.spec.aggregate and self.spec.readable):
            # the payload and the base model it is relative to: each audited client's messages in the victim round
            return CapturePolicy(kinds="all", rounds="victim", clients=clients, victim_round=victim.round,
                                 victim_client=victim.client)
        later = 0 if self.kind == "aggregate" else 1  # a secure aggregate is made in the round; a cluster model sent next
        return CapturePolicy(kinds=frozenset({self.kind}), rounds=frozenset({victim.round + later}), clients="all")

    def images(self, payload: Payload, victim: Victim, *, unroll: bool = False) -> int:
        """How many private images the attacker rebuilds from ``payload``, from its declared training record.

        An aggregate: every participant's images. A replay of local training (``unroll``): every
        image the record says the update was trained on. Otherwise ``victim.num_images``, at
        most the record's data size (with ``victim.update_data=all`` the attacker rebuilds that
        many of the update's images; scoring matches them one-to-one against all of them).
        """
        if self.spec.aggregate and payload.training is not None and payload.training.parts:
            return sum(part.images for part in payload.training.parts)
        if payload.training is None:
            return victim.num_images
        if unroll:
            return payload.training.num_samples
        return min(victim.num_images, payload.training.num_samples)

    def select(self, store: PayloadStore, victim: Victim) -> tuple[Payload, Payload | None]:
        """The chosen payload and the base payload it is relative to (if recorded)."""
        if self.spec.aggregate:
            return self._aggregate(store, victim)
        end = "sender" if self.spec.direction == "up" else "receiver"
        round_ = 0 if self.spec.once else victim.round
        found = list(store.records(kind=self.kind, round=round_, phase="training", **{end: victim.name}))
        if not found:
            raise PrivbenchError(f"no {self.kind} payload of {victim.name} in round {round_} was recorded")
        payload = store.load(found[0]["id"])
        base = store.load(payload.base) if payload.base else None
        # a compressed message as the server reads it; only a change needs its base, and a stored base may be
        # partial (fl.downlink=gene: a gene-only download), so a values message is decoded within its own bounds
        change = base is not None and (payload.encoding or "").endswith("/change")
        try:
            payload = decode(payload, base.tensors if change and base is not None else None)
        except ValueError as exc:
            raise PrivbenchError(str(exc)) from None
        return payload, base

    def _secure_aggregate(self, store: PayloadStore, victim: Victim) -> tuple[Payload, Payload]:
        """The aggregate secure aggregation unmasked for the victim's cohort in the victim round (it records its
        members' declared training), and the model the victim received."""
        r = victim.round
        mine = list(store.records(kind="masked_upload", round=r, sender=victim.name))
        if not mine:
            if any(True for _ in store.records(round=r, receiver=victim.name)):
                raise PrivbenchError(f"{victim.name} sent no masked_upload in round {r}: it was alone in its cohort "
                                     "(SecAgg+ needs two); sample more participants (fl.participants)")
            raise PrivbenchError(f"{victim.name} sent no masked_upload in round {r} (is aggregation=secagg on?)")
        found = [rec for rec in store.records(kind="aggregate", round=r, cluster=mine[0]["cluster"]) if rec["stored"]]
        if not found:
            raise PrivbenchError(f"no secure aggregate of {victim.name}'s cohort in round {r} was kept: a cohort of one "
                                 "client is not aggregated (SecAgg+ needs two), or capture left it out")
        return store.load(found[0]["id"]), store.load(mine[0]["base"])

    def _aggregate(self, store: PayloadStore, victim: Victim) -> tuple[Payload, Payload]:
        if self.kind == "aggregate":
            return self._secure_aggregate(store, victim)
        r = victim.round
        uploads = kinds_where(direction="up", carries="model", aggregate=False)
        mine = [rec for k in uploads for rec in store.records(kind=k, round=r, sender=victim.name)]
        if not mine:
            raise PrivbenchError(f"{victim.name} sent no model upload in round {r}")
        k = mine[0]["cluster"]
        members = [rec for kind_name in uploads for rec in store.records(kind=kind_name, round=r, cluster=k)]
        after = [rec for rec in store.records(kind=self.kind, round=r + 1, cluster=k) if rec["stored"]]
        if not after:
            raise PrivbenchError(f"cluster {k} has no {self.kind} in round {r + 1}: no member of it was sampled then, "
                                 f"or fl.rounds <= victim.round + 1; pick another victim.round or seed")
        received = store.load(mine[0]["base"])
        model = store.load(after[0]["id"])
        assert model.tensors is not None
        sent = [{plain_name(n) for n in m["names"]} for m in members]
        names = [n for n in model.names if any(n in s for s in sent)]
        parts: list[AggregatePart] = []
        for m, s in zip(members, sent):
            t = LocalTraining.from_dict(m["training"])
            parts.append(AggregatePart(client=m["sender"], images=t.num_samples, num_samples=t.num_samples,
                                       steps=t.steps, batch_size=t.batch_size,
                                       names=tuple(n for n in names if n in s)))
        training = LocalTraining.from_dict(mine[0]["training"]).of_cohort(parts)
        payload = Payload.from_tensors(kind=self.kind, round=r + 1, sender="server", receiver=after[0]["receiver"],
                                       tensors={n: model.tensors[n] for n in names}, base=received.id, cluster=k,
                                       training=training)
        return payload, received

    def truth(self, store: PayloadStore, payload: Payload) -> list[int]:
        """The evaluator's ground truth of ``payload`` as ``select`` returned it (an aggregate: its members' union)."""
        if not self.spec.aggregate:
            return store.truth(payload.id)
        assert payload.training is not None
        members = {part.client for part in payload.training.parts}
        uploads: tuple[str, ...]
        if self.kind == "aggregate":
            uploads, round_ = ("masked_upload",), payload.round
        else:
            uploads, round_ = kinds_where(direction="up", carries="model", aggregate=False), payload.round - 1
        return [i for k in uploads for rec in store.records(kind=k, round=round_, cluster=payload.cluster)
                if rec["sender"] in members for i in store.truth(rec["id"])]
