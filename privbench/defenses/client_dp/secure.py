"""DP-FedAvg over SecAgg+ (``aggregation=dpfedavg_secagg``): each client clips its own update, SecAgg+ sums the
clipped models (the server sees the cohort's uniform mean, never an upload), and the server adds the Gaussian noise
to that sum before it releases the model, as Flower's client-side fixed clipping (``fixedclipping_mod``) under its
``SecAggPlusWorkflow``. The noise protects the released models; the server itself sees the clean sum of the clipped
updates, which is all SecAgg+ lets it see of any one client.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import torch

from privbench.defenses.client_dp.clipping import change_from, clip
from privbench.defenses.client_dp.mechanism import DPFedAvg
from privbench.defenses.client_dp.wire import LocalDPWire
from privbench.defenses.secure_aggregation import SecAggPlus
from privbench.errors import ConfigError
from privbench.fl.protocols.cohort import Sealed
from privbench.fl.protocols.round import Upload
from privbench.fl.sgd import State
from privbench.fl.wire import Wire
from privbench.payloads.encoding import decode
from privbench.schema import ClipNorm, Number


class SecureDPFedAvg(DPFedAvg):
    """Central DP-FedAvg whose sum is SecAgg+'s; settings of both in ``privbench/conf/aggregation/dpfedavg_secagg.yaml``.

    Example:
        >>> SecureDPFedAvg(noise_multiplier=1.0, clip=0.5).describe()["mode"]
        'central, over SecAgg+'
    """

    name = "dpfedavg_secagg"
    sends = SecAggPlus.sends
    seals = True

    def __init__(self, *, num_shares: int | float = 1.0, reconstruction_threshold: int | float = 0.5,
                 clipping_range: ClipNorm = 8.0,
                 quantization_range: Annotated[int, Number(integer=True, low=2, high=2**31)] = 2**22,
                 modulus_range: Annotated[int, Number(integer=True, low=4, high=2**32)] = 2**32, seed: int = 0,
                 **dp: Any) -> None:
        if dp.get("mode", "central") != "central":
            raise ConfigError(f"aggregation.mode={dp['mode']!r}: DP-FedAvg over SecAgg+ noises the secure sum "
                              "(central); local DP needs no secure sum to hide its uploads")
        if dp.get("adaptive"):
            raise ConfigError("aggregation.adaptive=true: under SecAgg+ the server never sees which updates were "
                              "clipped (the count would need a secure sum of its own); use a fixed clip")
        super().__init__(seed=seed, **{k: v for k, v in dp.items() if k != "mode"})
        self.secure = SecAggPlus(num_shares=num_shares, reconstruction_threshold=reconstruction_threshold,
                                 clipping_range=clipping_range, quantization_range=quantization_range,
                                 modulus_range=modulus_range, seed=seed, uniform=True)

    def secure_sum(self) -> SecAggPlus:
        return self.secure

    def client_wire(self, wire: Wire) -> Wire:
        return Sealed(wire)  # held for SecAgg+, never recorded

    def node_wire(self, wire: Wire) -> Wire:
        """On Flower, a ClientApp clips its upload before Flower's SecAgg+ mod masks it."""
        return LocalDPWire(wire, _ClientClip(self.clip, self.skip_clipping))

    def combine_aggregate(self, base: State, uploads: Sequence[Upload], *, round_: int, group: int | None) -> State:
        """Flower's SecAgg+ ran over the clients' clipped models (each weighing 1): its mean back to a sum over the
        cohort's members, then the canaries and the server's noise."""
        made = uploads[0].tensors
        for u in {u.payload.id: u for u in uploads}.values():
            for part in (u.payload.training.parts if u.payload.training else ()):
                self.joined[part.client] = self.joined.get(part.client, 0) + 1
        shapes = [n for n, t in base.items() if t.is_floating_point()]
        counts = {n: len(uploads) for n in shapes}
        sums = {n: (made[n].double() - base[n].double()) * counts[n] if n in made
                else torch.zeros_like(base[n], dtype=torch.float64) for n in shapes}
        return self.release(base, sums, counts, round_=round_, group=group, cohort=len(uploads), unclipped=[])

    def check_cohorts(self, sizes: Sequence[int], *, weights: Sequence[int]) -> None:
        self.secure.check_cohorts(sizes, weights=weights)

    def plan(self, *, rounds: int, participants: int, victim_round: int, uploads: Sequence[str],
             sample_rate: float = 1.0, victims: Sequence[str] = ()) -> None:
        if sample_rate < 1:
            raise ConfigError("fl.sampling=poisson with aggregation=dpfedavg_secagg: secure aggregation is set up for "
                              "a known cohort size; use fl.sampling=fixed")
        super().plan(rounds=rounds, participants=participants, victim_round=victim_round, uploads=uploads,
                     sample_rate=sample_rate, victims=victims)

    def combine(self, base: State, uploads: Sequence[Upload], *, round_: int, group: int | None, wire: Wire,
                seed: int, truth: Mapping[str, Sequence[int]] | None = None) -> State:
        """Each client's model clipped to ``C`` from ``base`` before it is masked; SecAgg+'s uniform mean back to a
        sum per name; then the canaries and the server's noise as in central DP-FedAvg."""
        clipped = []
        for u in uploads:
            tensors = decode(u.payload, base).tensors or {}
            change, _ = clip(change_from(tensors, base), self.clip, skip=self.skip_clipping)
            clipped.append(Upload(u.num_samples, u.payload.with_tensors({n: base[n] + t for n, t in change.items()}),
                                  u.layers))
            self.joined[u.payload.sender] = self.joined.get(u.payload.sender, 0) + 1
        mean = self.secure.combine(base, clipped, round_=round_, group=group, wire=wire, seed=seed, truth=truth)
        shapes = [n for n, t in base.items() if t.is_floating_point()]
        counts = {n: sum(n in (u.payload.tensors or {}) for u in clipped) for n in shapes}
        sums = {n: (mean[n].double() - base[n].double()) * counts[n] for n in shapes}
        if len(clipped) < 2:  # SecAgg+ kept the model as sent: nothing was summed
            sums = {n: torch.zeros_like(base[n], dtype=torch.float64) for n in shapes}
        # which updates were clipped stays on the clients: the server has no share to report
        return self.release(base, sums, counts, round_=round_, group=group, cohort=len(uploads), unclipped=[])

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        secure = self.secure.describe()
        out.update(mode="central, over SecAgg+", secagg={k: v for k, v in secure.items() if k != "server_sees"},
                   server_sees="each cohort's mean of clipped updates through SecAgg+ (payload=aggregate), never an "
                               "upload; the released model carries the server's noise")
        if "summary" in out:
            out["summary"][0] = out["summary"][0].replace("central DP-FedAvg", "central DP-FedAvg over SecAgg+")
        return out


class _ClientClip:
    """A client's part of DP-FedAvg over SecAgg+ on its own node: its change clipped to ``C``, no noise."""

    def __init__(self, bound: float, skip: tuple[str, ...]) -> None:
        self.bound, self.skip = bound, skip

    def local_release(self, change: State, *, round_: int, who: str) -> State:
        return clip(change, self.bound, skip=self.skip)[0]

    def local_note(self) -> str:
        return f"DP-FedAvg over SecAgg+: change clipped to {self.bound:g} by the client"
