"""DP-FedAvg (McMahan et al., ICLR 2018): client-level DP around each cohort's aggregation.

Each client's update (its upload's change from the model it received) is clipped to L2 norm ``C``; Gaussian noise
``N(0, (z C)^2)`` goes on the sum of a cohort's clipped updates at the server (``mode=central``, as Flower's
server-side fixed and adaptive clipping strategies) or on each clipped update by its client before it is sent
(``mode=local``, as Flower's ``LocalDpMod``); the server averages uniformly, dividing each name's noisy sum by the
number of uploads that carry it (the cohort and the layer lists are public: they are not protected). Adaptive
clipping moves ``C`` toward a quantile of the update norms with a noisy count whose privacy is accounted
(``clipping.split_noise``). Canary clients measure the mechanism in the same run (``canary_clients``).
"""
from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from privbench.defenses.client_dp.accountant import ClientSchedule, epsilon, noise_for, rounds_within
from privbench.defenses.client_dp.canary_clients import CanaryClients, verdict
from privbench.defenses.client_dp.clipping import QuantileClip, change_from, clip, split_noise
from privbench.defenses.client_dp.settings import checked
from privbench.defenses.client_dp.wire import LocalDPWire
from privbench.figures import CLIENT_EPSILON, CLIENT_EPSILON_CANARY
from privbench.fl.protocols.cohort import Aggregation
from privbench.fl.protocols.round import Upload
from privbench.fl.sgd import State
from privbench.fl.wire import Wire
from privbench.payloads.encoding import decode
from privbench.schema import Switch


class DPFedAvg(Aggregation):
    """Client-level DP-FedAvg around each cohort (``aggregation=dpfedavg``); settings in ``privbench/conf/aggregation``.

    Example:
        >>> DPFedAvg(noise_multiplier=1.0, clip=0.5).describe()["mode"]
        'central'
    """

    name = "dpfedavg"
    #: names left unclipped: a broken mechanism for the tests to catch, never a setting.
    skip_clipping: ClassVar[tuple[str, ...]] = ()
    #: the sensitivity local noise is scaled to in place of the clip (Flower's ``LocalDpMod`` takes the two apart):
    #: a broken mechanism for the tests to catch, never a setting.
    noise_sensitivity: ClassVar[float | None] = None
    #: the Poisson rate told to the accountant in place of the one the cohort is drawn at: a broken mechanism for
    #: the tests to catch, never a setting.
    reported_rate: ClassVar[float | None] = None

    def __init__(self, *, mode: str = "central", clip: float = 1.0, noise_multiplier: float | None = 1.0,
                 target_epsilon: float | None = None, delta: float = 1e-5, accountant: str = "pld",
                 adaptive: Switch = False, target_quantile: float = 0.5, clip_lr: float = 0.2,
                 clipped_count_stddev: float | None = None, budget: float | None = None,
                 canary_clients: int = 0, canary_scale: float = 2.0,
                 seed: int = 0) -> None:
        checked(mode=mode, clip=clip, noise_multiplier=noise_multiplier, target_epsilon=target_epsilon, delta=delta,
                accountant=accountant, adaptive=adaptive, budget=budget, canary_clients=canary_clients,
                canary_scale=canary_scale)
        self.mode, self.delta, self.accountant = mode, delta, accountant
        self.z = float(noise_multiplier or 0.0)
        self.target_epsilon, self.budget = target_epsilon, budget
        self.quantile = QuantileClip(clip, target=target_quantile, lr=clip_lr, count_stddev=0.0) if adaptive else None
        self.adaptive_settings = (target_quantile, clip_lr, clipped_count_stddev)
        self.clip = float(clip)
        self.canary_count, self.canary_scale, self.seed = int(canary_clients), float(canary_scale), seed
        self.rounds, self.allowed, self.sample_rate, self.participants = 0, 0, 1.0, 0
        self.denominator: int | None = None  # Poisson: the expected cohort every noisy sum is divided by
        self.forced: set[str] = set()
        self.count_stddev, self.update_z = 0.0, self.z
        self.canaries: CanaryClients | None = None
        self.joined: dict[str, int] = {}
        self.canary_rounds: set[int] = set()
        self.unclipped: dict[int, list[bool]] = {}  # adaptive: each round's unclipped indicators, until it steps
        self.shared_noise: list[float] = []  # local DP: mean cosine of two unseen canaries' uploads, per round
        self.history: list[dict[str, float]] = []

    # -- planning (before training) --------------------------------------------------------------------------
    def plan(self, *, rounds: int, participants: int, victim_round: int, uploads: Sequence[str],
             sample_rate: float = 1.0, victims: Sequence[str] = ()) -> None:
        """Calibrate the noise, the budget stop and the clip estimate's noise; refuse what cannot be accounted.
        Under Poisson sampling (``sample_rate < 1``) each round is amplified by it and the noisy sum is divided by
        the expected cohort, ``participants``, a public constant."""
        from privbench.errors import ConfigError

        if not uploads:
            raise ConfigError(f"aggregation={self.name}: this protocol aggregates no model update (it sends none); "
                              "use fl=fedavg, fl=cluster_fedavg or fl=genefl")
        if not 0 < sample_rate <= 1:
            raise ConfigError(f"a client's sampling rate must be in (0, 1], got {sample_rate:g} (fl.participants "
                              "over data.num_clients)")
        if self.mode == "local":  # the server sees who sends each upload: sampling hides no one from it
            sample_rate = 1.0
        self.rounds, self.sample_rate, self.participants = rounds, float(sample_rate), participants
        self.denominator = participants if sample_rate < 1 else None
        self.forced = set(victims)  # joined their round whatever the draw: that round is not amplified for them
        if self.target_epsilon is not None:
            self.z = noise_for(self.target_epsilon, rounds=rounds, delta=self.delta,
                               sample_rate=self.accounted_rate(), accountant=self.accountant)
        self.allowed = rounds
        if self.budget is not None:
            self.allowed = rounds_within(self.budget, noise_multiplier=self.z, rounds=rounds, delta=self.delta,
                                         sample_rate=self.accounted_rate(), accountant=self.accountant)
            if self.allowed == 0:
                raise ConfigError(f"aggregation.budget={self.budget}: not one round fits it at noise multiplier "
                                  f"{self.z:.4g} (epsilon of one round: {self.claimed(1):.3g})")
            if victim_round >= self.allowed:
                raise ConfigError(f"aggregation.budget={self.budget} stops training after {self.allowed} round(s), "
                                  f"before victim.round={victim_round}")
        if self.quantile is not None:
            stddev = self.adaptive_settings[2]
            self.count_stddev = participants / 20 if stddev is None else float(stddev)
            self.update_z = split_noise(self.z, self.count_stddev)
            self.quantile = QuantileClip(self.clip, target=self.adaptive_settings[0], lr=self.adaptive_settings[1],
                                         count_stddev=self.count_stddev)
        else:
            self.update_z = self.z

    def rounds_allowed(self, rounds: int) -> int:
        return min(rounds, self.allowed or rounds)

    def claimed(self, rounds: int, accountant: str | None = None, *, forced: bool = False) -> float:
        """The accountant's client-level epsilon after ``rounds`` rounds (joined, or run under Poisson sampling;
        ``forced``: one of them joined whatever the draw, a victim's audited round, so not amplified)."""
        unamplified = 1 if forced and self.sample_rate < 1 and rounds else 0
        return epsilon(ClientSchedule(self.z, rounds - unamplified, self.accounted_rate(), unamplified),
                       delta=self.delta, accountant=accountant or self.accountant)

    def accounted_rate(self) -> float:
        """The sampling rate the accountant is told (the cohort's own, unless a test breaks it)."""
        return self.sample_rate if self.reported_rate is None or self.sample_rate == 1 else self.reported_rate

    # -- the mechanism ---------------------------------------------------------------------------------------
    def noise_generator(self, round_: int, who: str) -> torch.Generator:
        """The generator of one release's noise: fixed by (seed, round, who adds it); none is ever shared."""
        seed = int(np.random.SeedSequence([self.seed, round_, zlib.crc32(who.encode())]).generate_state(1)[0])
        return torch.Generator().manual_seed(seed)

    def local_release(self, change: State, *, round_: int, who: str) -> State:
        """What a client sends under local DP: its change clipped to ``C`` plus its own noise of std ``z C``."""
        clipped, _ = clip(change, self.clip, skip=self.skip_clipping)
        std = self.z * (self.noise_sensitivity if self.noise_sensitivity is not None else self.clip)
        gen = self.noise_generator(round_, who)
        return {n: t + std * torch.randn(t.shape, generator=gen, dtype=t.dtype) if t.is_floating_point() else t
                for n, t in clipped.items()}

    def local_note(self) -> str:
        """What a client's local release did to its upload (the payload's ``protection``)."""
        return (f"local DP-FedAvg: change clipped to {self.clip:g}, N(0, ({self.z:.4g} x {self.clip:g})^2) added by "
                "the client")

    def client_wire(self, wire: Wire) -> Wire:
        return LocalDPWire(wire, self) if self.mode == "local" else wire

    def combine(self, base: State, uploads: Sequence[Upload], *, round_: int, group: int | None, wire: Wire,
                seed: int, truth: Mapping[str, Sequence[int]] | None = None) -> State:
        """Clip (central), sum, add the server's noise (central), average uniformly per name; observe canaries."""
        self.step_clip(round_)
        changes = []
        for u in uploads:
            tensors = decode(u.payload, base).tensors or {}
            changes.append(change_from(tensors, base))
            self.joined[u.payload.sender] = self.joined.get(u.payload.sender, 0) + 1
        unclipped = []
        if self.mode == "central":
            for i, ch in enumerate(changes):
                changes[i], norm = clip(ch, self.clip, skip=self.skip_clipping)
                unclipped.append(norm <= self.clip)
        shapes = {n: t.shape for n, t in base.items() if t.is_floating_point()}
        sums = {n: torch.zeros_like(base[n], dtype=torch.float64) for n in shapes}
        for ch in changes:
            for n, t in ch.items():
                sums[n] += t.double()
        counts = {n: self.denominator or sum(n in ch for ch in changes) for n in shapes}
        return self.release(base, sums, counts, round_=round_, group=group, cohort=len(uploads), unclipped=unclipped)

    def release(self, base: State, sums: dict[str, torch.Tensor], counts: dict[str, int], *, round_: int,
                group: int | None, cohort: int, unclipped: list[bool]) -> State:
        """A cohort's model from the sums of its clipped changes: the canaries' updates and the server's noise
        added (central), each name averaged over ``counts``; canaries observed in the release."""
        bound = self.clip
        shapes = {n: t.shape for n, t in base.items() if t.is_floating_point()}
        if self.canary_count and self.canaries is None:
            self.canaries = CanaryClients(self.canary_count, shapes=shapes, seed=self.seed, scale=self.canary_scale)
        canaries_join = self.canaries is not None and round_ not in self.canary_rounds  # one cohort a round
        if canaries_join:
            self.canary_rounds.add(round_)
        if self.canaries is not None and canaries_join and self.mode == "central":
            for ch in self.canaries.updates(bound, round_, self.sample_rate):
                ch, _ = clip(ch, bound, skip=self.skip_clipping)
                for n, t in ch.items():
                    sums[n] += t.double()
        if self.mode == "central" and self.update_z > 0:
            gen = self.noise_generator(round_, f"server/group{group}")
            for n in sums:
                sums[n] += self.update_z * bound * torch.randn(sums[n].shape, generator=gen, dtype=torch.float64)
        out = {n: t.clone() for n, t in base.items()}
        for n in shapes:
            if counts[n]:
                out[n] = (base[n].double() + sums[n] / counts[n]).to(base[n].dtype)
        # integer buffers (BatchNorm's step count) keep the server's value: the cohort's largest would be a
        # data-dependent release outside the accountant
        if canaries_join:
            self.observe(out, base, counts, bound, round_)
        self.unclipped.setdefault(round_, []).extend(unclipped)
        self.history.append({"round": round_, "clip": bound, "cohort": cohort,
                             "noise_std_on_sum": self.update_z * bound if self.mode == "central" else 0.0,
                             "unclipped": float(np.mean(unclipped)) if unclipped else float("nan")})
        return out

    def step_clip(self, round_: int) -> None:
        """Adaptive clipping: once a round, on the first cohort of the next, the bound moves by the round's noisy
        unclipped count over every cohort (each client adds one indicator a round)."""
        if self.quantile is None:
            return
        for r in sorted(r for r in self.unclipped if r < round_):
            gen = self.noise_generator(r, "server/clip-count")
            self.clip = self.quantile.step(self.unclipped.pop(r), noise=float(torch.randn(1, generator=gen)),
                                           denominator=self.participants)

    def observe(self, out: State, base: State, counts: dict[str, int], bound: float, round_: int) -> None:
        """Record the canaries' projections on this round's release (``CanaryClients.observe_release``)."""
        if self.canaries is None:
            return
        shared = self.canaries.observe_release(out, base, counts, bound, round_, central=self.mode == "central",
                                               rate=self.sample_rate, local_release=self.local_release)
        if shared is not None:
            self.shared_noise.append(shared)

    # -- what it claims and measured -------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"aggregation": self.name, "mode": self.mode, "noise_multiplier": self.z,
                               "clip": self.history[0]["clip"] if self.history else self.clip,
                               "adaptive": self.quantile is not None, "delta": self.delta,
                               "accountant": self.accountant, "adjacency": "add/remove one client's data",
                               "client_sampling": ("fixed-size, no amplification claimed" if self.sample_rate == 1
                                                   else f"Poisson at rate {self.sample_rate:g}, amplified"),
                               "server_sees": ("every upload as sent (central DP trusts the server; its noise "
                                               "protects the models it releases)"
                                               if self.mode == "central" else "every model upload clipped and noised"
                                               " by its client (the audit's one-step gradient, not protocol traffic,"
                                               " as computed)")}
        if self.quantile is not None:
            out.update(update_noise_multiplier=self.update_z, clipped_count_stddev=self.count_stddev,
                       target_quantile=self.quantile.target, clip_lr=self.quantile.lr)
        if self.target_epsilon is not None:
            out["target_epsilon"] = self.target_epsilon
        if not self.history:
            return out
        ran = len({h["round"] for h in self.history})
        out["rounds_run"] = ran
        if self.allowed and self.allowed < self.rounds:
            out["budget_stop"] = (f"stopped after {self.allowed} of {self.rounds} rounds: another would pass "
                                  f"the budget epsilon {self.budget}")
        # a fixed-size draw charges each client the rounds it joined; Poisson sampling, every round run, amplified
        # except a victim's forced round
        def charged(client: str, joined: int) -> tuple[int, bool]:
            return (joined, False) if self.sample_rate == 1 else (ran, client in self.forced)

        keys = {charged(c, r) for c, r in self.joined.items()} | {(ran, bool(self.forced) and self.sample_rate < 1)}
        claims = {k: self.claimed(k[0], forced=k[1]) for k in keys}
        out[f"{CLIENT_EPSILON.key}_per_client"] = {c: claims[charged(c, r)] for c, r in sorted(self.joined.items())}
        worst = (ran, bool(self.forced) and self.sample_rate < 1)
        out[CLIENT_EPSILON.key] = claims[worst]
        other = "rdp" if self.accountant == "pld" else "pld"
        out[f"{CLIENT_EPSILON.key}_other"] = self.claimed(ran, other, forced=worst[1])
        out["clip_history"] = [h["clip"] for h in self.history]
        # per cohort, as the server counted it before its noise (nan under local DP): not covered by the epsilon
        out["unclipped_share_not_private"] = [h["unclipped"] for h in self.history]
        summary = [f"client-level epsilon {claims[worst]:.2f} at delta {self.delta:g} ({self.accountant}; "
                   f"{other} {out[f'{CLIENT_EPSILON.key}_other']:.2f}) over {ran} "
                   f"round(s), {self.mode} DP-FedAvg, noise multiplier {self.z:.3g}, clip "
                   f"{'adaptive from ' if self.quantile else ''}{out['clip']:.3g}"]
        if "budget_stop" in out:
            summary.append(out["budget_stop"])
        figures = {CLIENT_EPSILON.key: claims[worst]}
        if self.canaries is not None and self.canaries.rows:
            claim = claims[(ran, False)] if (ran, False) in claims else self.claimed(ran)
            out["canary_estimate"], canaries, figures[CLIENT_EPSILON_CANARY.key] = self._canary_reading(claim)
            summary.append(f"canary clients ({canaries} in, {canaries} unseen): {out['canary_estimate']['verdict']}")
        out["summary"], out["figures"] = summary, figures
        return out

    def _canary_reading(self, claim: float) -> tuple[dict[str, Any], int, float]:
        """The canary clients' estimate against ``claim`` with its verdict, how many canaries went in, and the
        estimated epsilon."""
        assert self.canaries is not None
        est = self.canaries.estimate(delta=self.delta, seed=self.seed)
        shared = float(np.mean(self.shared_noise)) if self.shared_noise else 0.0
        reading = {**est.as_dict(), "claimed": claim, "planned_noise": self.update_z,
                   "verdict": verdict(est, claimed=claim, planned_noise=self.update_z, shared_noise=shared,
                                      rate=self.accounted_rate())}
        if self.shared_noise:
            reading["client_noise_cosine"] = shared
        return reading, est.canaries, est.epsilon
