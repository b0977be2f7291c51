"""SecAgg+ (Bell et al., CCS 2020), the secure aggregation of Flower's ``SecAggPlusWorkflow``, in this process.

Per cohort (a FedAvg round, or one cluster's clients) and round, four stages, every message recorded and counted:

1. setup: each client makes two X25519 key pairs and sends the public keys (``secagg_public_keys``); the server
   places the clients on a seeded ring and sends each its ``num_shares - 1`` neighbours' keys
   (``secagg_neighbour_keys``);
2. share keys: each client draws a 32-byte mask seed ``b``, splits it and its first private key into Shamir
   shares (any ``threshold`` rebuild them) and sends each neighbour its shares encrypted to it
   (``secagg_key_shares``, AES-GCM under an X25519 + HKDF key); the server forwards them
   (``secagg_forwarded_shares``);
3. collect masked vectors: each client quantises ``[w 1[n sent], w theta_n]`` (``w = num_samples / max_weight``,
   stochastic rounding into ``quantization_range`` levels over ``[-clipping_range, clipping_range]``) and adds
   its own mask ``PRG(b)`` and, for each neighbour ``v``, ``+/- PRG(s_uv)`` (``s_uv`` agreed by X25519, the sign
   by the order of the pair) mod ``modulus_range`` (``masked_upload``, 4 bytes a coordinate);
4. unmask: the server names the survivors (``secagg_unmask_request``) and each returns its shares of its
   neighbours' seeds (``secagg_unmask_shares``); the server rebuilds every ``b``, removes ``PRG(b)`` from the sum
   (the pairwise masks cancel in it) and divides the weighted sum by the summed weights, per name.

What the server keeps is the cohort's weighted mean (``aggregate``); no client's upload is recorded. A name a
client did not send (a learnGene's other layers) enters as 0 with weight 0, so the mean is over its senders, as
in plain aggregation; a learnGene is therefore masked, and sent, at the full model's size. Every client in this
process survives (no dropouts are simulated; the dropped-client path, rebuilding a dropout's pairwise masks from
its first key's shares, is not exercised). Key material comes from the operating system's randomness; the
stochastic rounding is seeded, so the aggregate is the same for the same seed.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import numpy as np
import torch

from privbench.defenses.secure_aggregation.crypto import mask, shared_key
from privbench.defenses.secure_aggregation.exchange import (
    Member,
    advertise_keys,
    digest,
    receive_shares,
    sender,
    share_keys,
    unmask_shares,
)
from privbench.defenses.secure_aggregation.settings import check_cohorts, checked_settings, cohort_sizes
from privbench.defenses.secure_aggregation.shamir import combine_shares
from privbench.fl.protocols.cohort import Aggregation
from privbench.fl.protocols.round import Upload
from privbench.fl.sgd import State
from privbench.fl.wire import Wire
from privbench.payloads import AggregatePart, Payload
from privbench.progress import log
from privbench.schema import ClipNorm, Number, Switch


class SecAggPlus(Aggregation):
    """SecAgg+ over each cohort, with Flower's settings and defaults (``SecAggPlusWorkflow``).

    Args:
        num_shares: shares of each client's secrets, one per neighbour and itself; a float is that share of the
            cohort (rounded, made odd), 1.0 every client (SecAgg).
        reconstruction_threshold: shares that rebuild a secret; a float is that share of ``num_shares`` (at least 2).
        clipping_range: values are clipped to ``[-clipping_range, clipping_range]`` before quantising.
        quantization_range: quantisation levels.
        modulus_range: the masks' modulus, a power of 2 above ``quantization_range`` (at most 2^32).
        max_weight: the largest sample count a client may weigh (weights are ``num_samples / max_weight``).
        seed: the run's seed (the ring's order and the stochastic rounding).
        uniform: every client weighs 1 (DP-FedAvg's uniform mean; ``num_samples`` is not used).
        agreed_download: each member's public keys carry the SHA-256 of the model it received, relayed with the
            keys; a member whose neighbours' digests differ from its own sends no shares, and the round is abandoned
            (privbench's check against per-client downloads; it trusts the relay as SecAgg+ trusts it with the keys:
            signed keys, the malicious-server variant, would bind it).
    """

    name = "secagg"
    sends = ("secagg_public_keys", "secagg_neighbour_keys", "secagg_key_shares", "secagg_forwarded_shares",
             "masked_upload", "secagg_unmask_request", "secagg_unmask_shares", "aggregate")
    seals = True

    def __init__(self, *, num_shares: int | float = 1.0, reconstruction_threshold: int | float = 0.5,
                 clipping_range: ClipNorm = 8.0,
                 quantization_range: Annotated[int, Number(integer=True, low=2, high=2**31)] = 2**22,
                 modulus_range: Annotated[int, Number(integer=True, low=4, high=2**32)] = 2**32,
                 max_weight: Annotated[float, Number(low=0, high=1e12, open_low=True)] = 1000.0, seed: int = 0,
                 uniform: bool = False, agreed_download: Switch = False) -> None:
        num_shares, reconstruction_threshold = checked_settings(
            num_shares=num_shares, reconstruction_threshold=reconstruction_threshold, clipping_range=clipping_range,
            quantization_range=quantization_range, modulus_range=modulus_range, max_weight=max_weight)
        self.num_shares, self.threshold = num_shares, reconstruction_threshold
        self.clip, self.levels, self.modulus, self.max_weight = float(clipping_range), quantization_range, \
            modulus_range, float(max_weight)
        self.seed, self.uniform, self.agreed_download = seed, uniform, bool(agreed_download)
        #: the members that abandoned the last round over a download digest (``agreed_download``).
        self.abandoned: list[str] = []

    def describe(self) -> dict[str, Any]:
        return {"aggregation": self.name, "protocol": "SecAgg+ (Bell et al. 2020), the stages of Flower's "
                "SecAggPlusWorkflow, in process", "num_shares": self.num_shares,
                "reconstruction_threshold": self.threshold, "clipping_range": self.clip,
                "quantization_range": self.levels, "modulus_range": self.modulus, "max_weight": self.max_weight,
                "agreed_download": self.agreed_download,
                "server_sees": "each cohort's weighted mean (payload=aggregate), never an upload"}

    def sizes(self, n: int) -> tuple[int, int]:
        """Shares per secret and the threshold for a cohort of ``n`` (``settings.cohort_sizes``)."""
        return cohort_sizes(self.num_shares, self.threshold, n)

    def check_cohorts(self, sizes: Sequence[int], *, weights: Sequence[int]) -> None:
        """Refuse, before training, settings that break SecAgg+ for a cohort of any of ``sizes`` clients
        (``settings.check_cohorts``)."""
        check_cohorts(self.num_shares, self.threshold, levels=self.levels, modulus=self.modulus,
                      max_weight=self.max_weight, sizes=sizes,
                      weights=[int(self.max_weight) + 1] * len(weights) if self.uniform else weights)

    def ring(self, names: Sequence[str], shares: int, *, round_: int, group: int | None) -> dict[str, list[str]]:
        """Each client's neighbours (itself included): ``shares`` consecutive places of a seeded shuffle."""
        order = [names[i] for i in np.random.default_rng([self.seed, round_, 0 if group is None else group + 1, 11])
                 .permutation(len(names))]
        half, n = shares // 2, len(order)
        return {u: sorted({order[(i + o) % n] for o in range(-half, half + 1)}) for i, u in enumerate(order)}

    # -- the client's side ------------------------------------------------------------------------------------

    def _encode(self, member: Member, names: Sequence[str], base: State, *, round_: int, client: int) -> np.ndarray:
        """``[q(w 1[n sent]) for n] + [q(w theta_n) for n]`` (weights as integers, values stochastically rounded)."""
        tensors = member.upload.tensors
        q_ratio = self.levels if self.uniform else round(member.upload.num_samples / self.max_weight * self.levels)
        dq_ratio = q_ratio / self.levels
        factors = np.array([q_ratio if n in tensors else 0 for n in names], dtype=np.int64)
        values = np.concatenate([(dq_ratio * tensors[n].double().cpu().numpy().ravel()) if n in tensors
                                 else np.zeros(base[n].numel()) for n in names])
        clipped = int(np.count_nonzero(np.abs(values) > self.clip))
        if clipped:
            log.warning("secagg: %s clipped %d values beyond +/-%g before quantising", member.name, clipped, self.clip)
        scaled = (np.clip(values, -self.clip, self.clip) + self.clip) * (self.levels / (2 * self.clip))
        rounding = np.random.default_rng([self.seed, round_, client, 97]).random(scaled.shape)
        quantised = np.floor(scaled).astype(np.int64) + (rounding < scaled - np.floor(scaled))
        return np.concatenate([factors, quantised])

    def _masked(self, member: Member, vector: np.ndarray) -> np.ndarray:
        out = (vector + mask(member.seed, vector.size, self.modulus)) % self.modulus
        for v, (pk1, _) in member.neighbours.items():
            if v == member.name:
                continue
            pairwise = mask(shared_key(member.sk1, pk1, purpose=b"mask"), vector.size, self.modulus)
            out = (out + pairwise if member.name > v else out - pairwise) % self.modulus
        return out

    # -- the protocol -----------------------------------------------------------------------------------------

    def combine(self, base: State, uploads: Sequence[Upload], *, round_: int, group: int | None, wire: Wire,
                seed: int, truth: Mapping[str, Sequence[int]] | None = None,
                received: Mapping[str, bytes] | None = None) -> State:
        """The cohort's weighted mean of ``uploads`` through the four stages (``received``: each member's digest of
        the model it received, where it differs from ``base``; read with ``agreed_download``)."""
        truth, self.abandoned = truth or {}, []
        if len(uploads) < 2:
            log.warning("secagg: round %d, cohort %s has %d client(s); SecAgg+ needs two, so its model stays as sent",
                        round_, "all" if group is None else group, len(uploads))
            return {n: t.clone() for n, t in base.items()}
        members = {u.payload.sender: Member(u.payload.sender, u) for u in uploads}
        names = [n for n, t in base.items() if t.is_floating_point()]
        shares, threshold = self.sizes(len(members))
        ring = self.ring(list(members), shares, round_=round_, group=group)

        send = sender(wire, round_=round_, group=group)
        told = digest(base) if self.agreed_download else b""
        digests = {m: (received or {}).get(m, told) for m in members} if self.agreed_download else None
        public = advertise_keys(members.values(), send, digests)  # stage 0: setup
        forwarded, self.abandoned = share_keys(members.values(), ring, public, threshold, send)  # stage 1
        if self.abandoned:
            log.warning("secagg: round %d, %d member(s) saw a neighbour receive another model; the round is "
                        "abandoned and the model stays as sent", round_, len(self.abandoned))
            return {n: t.clone() for n, t in base.items()}
        # stage 2: collect masked vectors
        total = np.zeros(len(names) + sum(base[n].numel() for n in names), dtype=np.int64)
        for index, m in enumerate(members.values()):
            down = send("secagg_forwarded_shares", "server", m.name, forwarded[m.name])
            assert down.tensors is not None
            receive_shares(m, down.tensors)
            client = int(m.name.removeprefix("client")) if m.name.startswith("client") else index
            vector = self._masked(m, self._encode(m, names, base, round_=round_, client=client))
            upload = m.upload.payload
            sent = wire.send(Payload.from_tensors(kind="masked_upload", round=round_, sender=m.name, receiver="server",
                                                  tensors={"masked": torch.from_numpy(
                                                      vector.astype(np.uint32).view(np.int32))},
                                                  base=upload.base, cluster=group, training=upload.training),
                             truth=list(truth.get(upload.id, ())))
            assert sent.tensors is not None
            total = (total + sent.tensors["masked"].numpy().view(np.uint32).astype(np.int64)) % self.modulus
        # stage 3: unmask (every client survived)
        for u, got in unmask_shares(members.values(), send).items():
            if len(got) < threshold:
                raise ValueError(f"secagg: {len(got)} shares of {u}'s seed, below the threshold {threshold}")
            total = (total - mask(combine_shares(got[:threshold]), total.size, self.modulus)) % self.modulus
        return self._decode(total, names, base, len(members), round_=round_, group=group, wire=wire,
                            uploads=uploads)

    def _decode(self, total: np.ndarray, names: Sequence[str], base: State, count: int, *, round_: int,
                group: int | None, wire: Wire, uploads: Sequence[Upload]) -> State:
        """The weighted mean per name from the unmasked sum; record it as the server's view (``aggregate``)."""
        weights, values = total[: len(names)], total[len(names):]
        summed = values.astype(np.float64) * (2 * self.clip / self.levels) - self.clip - (count - 1) * self.clip
        out = {n: t.clone() for n, t in base.items()}
        offset = 0
        for n, w in zip(names, weights):
            size = base[n].numel()
            if w > 0:
                mean = summed[offset: offset + size] * (self.levels / float(w))
                out[n] = torch.from_numpy(mean.reshape(base[n].shape)).to(base[n].dtype).to(base[n].device)
            offset += size
        first = uploads[0].payload
        parts = tuple(AggregatePart(client=u.payload.sender, images=u.num_samples, num_samples=u.num_samples,
                                    steps=u.payload.training.steps if u.payload.training else 1,
                                    batch_size=u.payload.training.batch_size if u.payload.training else u.num_samples,
                                    names=tuple(u.payload.names)) for u in uploads)
        carried = sorted({n for u in uploads for n in u.payload.names}, key=list(base).index)
        training = first.training.of_cohort(parts) if first.training is not None else None
        wire.send(Payload.from_tensors(kind="aggregate", round=round_, sender=f"cohort{0 if group is None else group}",
                                       receiver="server", tensors={n: out[n] for n in carried}, base=first.base,
                                       cluster=group, training=training))
        return out


