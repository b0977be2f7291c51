"""Canary clients: an empirical client-level epsilon of DP-FedAvg in the same run (Andrew et al., ICLR 2024).

``count`` canary clients join every round with an update of norm ``scale * C`` in a random direction of their own
(isotropic, fixed by the seed), with a sign of its own each round (a known +-1 pattern, so that noise shared between
rounds cannot hide behind a constant canary); as many unseen canaries never send. Each round the release (the noisy
sum, read back from the server's model change and the public cohort counts; under local DP each canary's own noisy
upload) is projected on every canary's direction, in units of the round's clip norm (centrally, after taking out the
part the inserted canaries add when clipping works, which the auditor knows: only its own stays in). The projections
of the inserted and the unseen canaries are two samples of the mechanism's output under neighbouring inputs; fitted
as Gaussians they give mu-GDP, hence epsilon at delta. Over several rounds a canary's projections are combined by
the linear test that is optimal for Gaussian releases, its sign pattern weighted by the inverse of the rounds' noise
covariance (estimated from half the unseen canaries, scored on the rest); a bootstrap over canaries gives the
interval. The estimate is of the mechanism as implemented (clipping, noise, averaging, whatever bug they hold),
never of the protocol's other releases.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from privbench.metrics.one_run_fdp import gdp_epsilon

State = dict[str, torch.Tensor]
#: Canary directions generated together (rows of one matrix).
CHUNK = 64


class CanaryClients:
    """``count`` inserted and ``count`` unseen canary directions over ``shapes`` (the floating tensors' names).

    Example:
        >>> c = CanaryClients(2, shapes={"w": torch.Size([3])}, seed=0)
        >>> [round(float(u.norm()), 6) for u in c.directions(0, 4)]
        [1.0, 1.0, 1.0, 1.0]
    """

    def __init__(self, count: int, *, shapes: dict[str, torch.Size], seed: int, scale: float = 2.0) -> None:
        self.count, self.scale, self.seed = count, scale, seed
        self.shapes = dict(shapes)
        self.dims = sum(int(math.prod(s)) for s in self.shapes.values())
        self.rows: list[np.ndarray] = []  # per round: every canary's projection (inserted first), in clip units
        self.signs: list[np.ndarray] = []  # per round: every canary's sign

    def directions(self, start: int, stop: int) -> torch.Tensor:
        """Unit directions of canaries ``start..stop-1`` (inserted ones first, then the unseen), one per row."""
        rows = []
        for j in range(start, stop):
            gen = torch.Generator().manual_seed(int(np.random.SeedSequence([self.seed, j]).generate_state(1)[0]))
            rows.append(torch.randn(self.dims, generator=gen, dtype=torch.float64))
        u = torch.stack(rows)
        return u / u.norm(dim=1, keepdim=True)

    def flat(self, state: State) -> torch.Tensor:
        """``state``'s floating tensors of ``shapes``, flattened in their order (float64; missing names are 0)."""
        return torch.cat([state[n].double().flatten() if n in state else torch.zeros(int(math.prod(s)),
                                                                                       dtype=torch.float64)
                          for n, s in self.shapes.items()])

    def state(self, vector: torch.Tensor) -> State:
        """A flat vector back as named tensors (float32)."""
        out, at = {}, 0
        for n, s in self.shapes.items():
            size = int(math.prod(s))
            out[n] = vector[at:at + size].reshape(s).float()
            at += size
        return out

    def sign(self, j: int, round_: int) -> float:
        """Canary ``j``'s sign in round ``round_`` (+1 or -1, fixed by the seed)."""
        return 1.0 if np.random.default_rng([self.seed, j, round_, 1]).random() < 0.5 else -1.0

    def joins(self, j: int, round_: int, rate: float) -> bool:
        """Whether canary ``j`` joins round ``round_`` when clients join at ``rate`` (Poisson; always at 1.0)."""
        return rate >= 1.0 or bool(np.random.default_rng([self.seed, j, round_, 2]).random() < rate)

    def updates(self, bound: float, round_: int, rate: float = 1.0) -> list[State]:
        """The updates of the inserted canaries that join round ``round_``: norm ``scale * bound`` along each one's
        direction, times its sign."""
        out: list[State] = []
        for start in range(0, self.count, CHUNK):
            for j, u in enumerate(self.directions(start, min(start + CHUNK, self.count)), start):
                if self.joins(j, round_, rate):
                    out.append(self.state(self.sign(j, round_) * self.scale * bound * u))
        return out

    def known(self, bound: float, round_: int, rate: float = 1.0) -> torch.Tensor:
        """What the inserted canaries add to a round's sum when clipping works (``bound`` along each one's signed
        direction), flat: the auditor's own knowledge, taken out of a central release before it is projected so that
        the canaries do not stand in each other's way (their cross terms are ``count / dims`` of noise)."""
        total = torch.zeros(self.dims, dtype=torch.float64)
        for start in range(0, self.count, CHUNK):
            stop = min(start + CHUNK, self.count)
            signs = torch.tensor([self.sign(j, round_) * self.joins(j, round_, rate) for j in range(start, stop)],
                                 dtype=torch.float64)
            total += bound * (signs @ self.directions(start, stop))
        return total

    def observe(self, released: torch.Tensor | list[torch.Tensor], bound: float, round_: int,
                rate: float = 1.0) -> None:
        """Record this round's projections, in units of ``bound``: of one release (central) on every canary, or of
        each canary's own release (local: ``released[j]`` for canary ``j``) in round ``round_``, canaries joining at
        ``rate`` (the test that reads them never learns which joined: it scores every round with the sign)."""
        row = np.empty(2 * self.count)
        for start in range(0, 2 * self.count, CHUNK):
            stop = min(start + CHUNK, 2 * self.count)
            u = self.directions(start, stop)
            if isinstance(released, torch.Tensor):  # less the others' known part: each inserted one's own added back
                row[start:stop] = (u @ released).numpy() / bound
                row[start:stop] += [self.sign(j, round_) * self.joins(j, round_, rate) if j < self.count else 0.0
                                    for j in range(start, stop)]
            else:
                row[start:stop] = [float(u[j - start] @ released[j]) / bound for j in range(start, stop)]
        self.rows.append(row)
        self.signs.append(np.array([self.sign(j, round_) for j in range(2 * self.count)]))

    def observe_release(self, out: dict[str, torch.Tensor], base: dict[str, torch.Tensor], counts: dict[str, int],
                        bound: float, round_: int, *, central: bool, rate: float,
                        local_release: Callable[..., dict[str, torch.Tensor]]) -> float | None:
        """Observe one round's release. Central: the noisy sum the model change and the public ``counts`` give back,
        less the inserted canaries' known part. Local: each canary's own upload by ``local_release``, less the
        unseen canaries' mean; returns the mean cosine of two unseen canaries' uploads (noise shared between
        clients shows there), None centrally."""
        if central:
            released = {n: (out[n].double() - base[n].double()) * counts[n] for n in self.shapes}
            self.observe(self.flat(released) - self.known(bound, round_, rate), bound, round_, rate)
            return None
        zero = {n: torch.zeros(s) for n, s in self.shapes.items()}
        sent = [self.flat(local_release(ch, round_=round_, who=f"canary{j}"))
                for j, ch in enumerate(self.updates(bound, round_, 1.0))]
        sent += [self.flat(local_release(zero, round_=round_, who=f"canary{self.count + j}"))
                 for j in range(self.count)]
        unseen = torch.stack(sent[self.count:])
        pairs = torch.nn.functional.cosine_similarity(unseen[0::2][:len(unseen) // 2], unseen[1::2], dim=1)
        total, k = unseen.sum(0), len(unseen)
        differenced = [s - total / k for s in sent[:self.count]]
        differenced += [s - (total - s) / (k - 1) for s in sent[self.count:]]
        self.observe(differenced, bound, round_)
        return float(pairs.mean())

    def estimate(self, *, delta: float, seed: int, resamples: int = 1000) -> Estimate:
        """The empirical epsilon of the rounds observed so far."""
        z, s = np.stack(self.rows, axis=1), np.stack(self.signs, axis=1)  # canaries x rounds
        k = self.count
        return estimate(z[:k], z[k:], s[:k], s[k:], delta=delta, seed=seed, resamples=resamples)


@dataclass(frozen=True)
class Estimate:
    """An empirical epsilon from canary projections and its diagnostics (per round, in clip units)."""

    mu: float
    mu_interval: tuple[float, float]
    epsilon: float
    epsilon_interval: tuple[float, float]
    #: the bootstrap's 0.5 % quantile: above the claim, the verdict is BROKEN (at most 1 run in 200 of an honest
    #: mechanism under the Gaussian fit; the 95 % interval's lower end would flag 1 in 40).
    epsilon_alarm: float
    shift: float
    noise: float
    round_correlation: float
    canaries: int
    rounds: int

    def as_dict(self) -> dict[str, Any]:
        return {"mu": self.mu, "mu_interval": list(self.mu_interval), "empirical_epsilon": self.epsilon,
                "epsilon_interval": list(self.epsilon_interval), "epsilon_alarm": self.epsilon_alarm,
                "canary_shift": self.shift, "noise_measured": self.noise, "round_correlation": self.round_correlation,
                "canaries": self.canaries, "rounds": self.rounds}


def _mu(s_in: np.ndarray, s_out: np.ndarray) -> float:
    spread = math.sqrt((s_in.var(ddof=1) + s_out.var(ddof=1)) / 2)
    gap = float(s_in.mean() - s_out.mean())
    if spread > 0:
        return gap / spread
    return math.inf if gap > 0 else 0.0


def estimate(z_in: np.ndarray, z_out: np.ndarray, s_in: np.ndarray, s_out: np.ndarray, *, delta: float, seed: int,
             resamples: int = 1000) -> Estimate:
    """mu-GDP and epsilon at ``delta`` from the projections of inserted (``z_in``) and unseen (``z_out``) canaries
    with their sign patterns (canaries x rounds); 95 % bootstrap interval over canaries.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> s = rng.choice([-1.0, 1.0], size=(2000, 4))
        >>> e = estimate(s + rng.normal(size=(2000, 4)), rng.normal(size=(2000, 4)), s, s, delta=1e-5, seed=0)
        >>> 1.8 < e.mu < 2.2  # four releases of 1-GDP: 2-GDP
        True
    """
    fit, out, s_fit, s_out_ = z_out[0::2], z_out[1::2], s_out[0::2], s_out[1::2]
    del s_fit
    cov = np.atleast_2d(np.cov(fit, rowvar=False))
    shrink = min(1.0, len(cov) / max(len(fit), 1))  # toward the diagonal: few canaries, many rounds
    cov = (1 - shrink) * cov + shrink * np.diag(np.diag(cov))
    scale = float(np.trace(cov))
    cov = cov + np.eye(len(cov)) * 1e-9 * scale if scale > 0 else np.eye(len(cov))  # no noise at all: any metric
    inv = np.linalg.inv(cov)
    # the matched filter of each canary's sign pattern, whitened and normalised: unit variance under the noise
    t_in = np.einsum("ij,jk,ik->i", s_in, inv, z_in) / np.sqrt(np.einsum("ij,jk,ik->i", s_in, inv, s_in))
    t_out = np.einsum("ij,jk,ik->i", s_out_, inv, out) / np.sqrt(np.einsum("ij,jk,ik->i", s_out_, inv, s_out_))
    mu = _mu(t_in, t_out)
    rng = np.random.default_rng(seed)
    boot = [_mu(rng.choice(t_in, len(t_in)), rng.choice(t_out, len(t_out))) for _ in range(resamples)]
    alarm, low, high = (float(v) for v in np.quantile(boot, [0.005, 0.025, 0.975], method="inverted_cdf"))
    with np.errstate(invalid="ignore", divide="ignore"):  # a round without noise has no correlation
        corr = np.nan_to_num(np.corrcoef(z_out, rowvar=False)) if z_out.shape[1] > 1 else np.eye(1)
    off = corr[~np.eye(len(corr), dtype=bool)]
    return Estimate(mu, (low, high), gdp_epsilon(mu, delta=delta),
                    (gdp_epsilon(low, delta=delta), gdp_epsilon(high, delta=delta)), gdp_epsilon(alarm, delta=delta),
                    float((s_in * z_in).mean() - (s_out * z_out).mean()), float(z_out.std(0, ddof=1).mean()),
                    float(off.mean()) if off.size else 0.0, len(z_in), z_in.shape[1])


def verdict(est: Estimate, *, claimed: float, planned_noise: float, shared_noise: float = 0.0,
            rate: float = 1.0) -> str:
    """One line: the estimate against the claim (BROKEN where the bootstrap's 0.5 % quantile passes it), and then the
    defect class its diagnostics point to
    (``shared_noise``: the mean cosine of two unseen canary clients' uploads in a round, under local DP; ``rate``:
    the Poisson rate the accountant was told, so a canary moves a round's release by about ``rate`` clip norms)."""
    low, high = est.epsilon_interval
    if math.isnan(est.epsilon) or math.isnan(est.epsilon_alarm):
        return "undetermined: the canaries' scores gave no estimate (no noise and no signal, or a failed fit)"
    if not est.epsilon_alarm > claimed:
        where = "holds" if high >= claimed else "lies below"
        return (f"consistent with the claim: {est.epsilon:.2f} [{low:.2f}, {high:.2f}] {where} the accountant's "
                f"{claimed:.2f} (a lower bound of this mechanism, not a proof of the claim)")
    head = (f"BROKEN: empirical epsilon {est.epsilon:.2f} [{low:.2f}, {high:.2f}] exceeds the claim {claimed:.2f} "
            f"(99.5 % lower end {est.epsilon_alarm:.2f})")
    if est.shift > 1.25:
        return (f"{head}; a canary of norm above the clip moved the release by {est.shift:.2f} clip norms a round "
                "(clipped, at most 1): clipping skipped on part of the update")
    if rate < 1 and est.shift > 1.25 * rate + 0.05:
        return (f"{head}; canaries moved the release by {est.shift:.2f} clip norms a round where joining at the "
                f"accounted rate {rate:g} moves it by about {rate:g}: clients sampled more often than the accountant "
                "is told (or clipping skipped)")
    if shared_noise > 0.3:
        return (f"{head}; two clients' noise in one round points the same way (cosine {shared_noise:.2f}): noise "
                "reused across clients")
    if est.round_correlation > 0.3:
        return (f"{head}; the noise of different rounds is correlated ({est.round_correlation:.2f}): noise reused "
                "across rounds")
    if est.noise < 0.8 * planned_noise:
        return (f"{head}; the release carries {est.noise:.3g} clip norms of noise, the accountant assumes "
                f"{planned_noise:.3g}: noise calibrated to another sensitivity or scale")
    return f"{head}; no diagnostic singles out the defect"
