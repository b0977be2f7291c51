"""Opacus DP-SGD inside every client's local training, one persistent accountant per client."""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Annotated, Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from privbench.data.dataset import ImageDataset
from privbench.defenses.calibration import Event, epsilon, events, noise_multiplier, poisson_steps, shown, steps_by_rate
from privbench.defenses.canaries import GradientCanaries
from privbench.defenses.dp_reads import dp_fisher_diagonal, dp_subspace
from privbench.defenses.tradeoff import tpr_bound
from privbench.errors import ConfigError
from privbench.figures import EPSILON_MAX
from privbench.fl.clustering.subspace import per_class_subspace
from privbench.fl.reads import AUDIT_GRADIENT, COVERABLE, FISHER, LOCAL_SGD, SUBSPACE, PlannedRead
from privbench.fl.sgd import backpropagated_penalty_, per_sample_gradients
from privbench.fl.trainer import LocalSGD, Regulariser, Trainer
from privbench.schema import ClipNorm, Number, Probability

ACCOUNTANTS = ("rdp", "prv")
MECHANISMS = {
    LOCAL_SGD: "dp-sgd: per-sample clipping + gaussian noise, poisson sampling (opacus)",
    AUDIT_GRADIENT: "one dp-sgd step on the fixed victim batch (sample rate 1)",
    FISHER: "gaussian: clipped per-sample squared gradients + noise (sample rate 1)",
    SUBSPACE: "dp-pca: analyze gauss on unit-norm images (sample rate 1)",
}


class DPSGD(Trainer):
    """DP-SGD (per-sample clipping to ``max_grad_norm`` + Gaussian noise) via Opacus: a trainer.

    Each client has one ``opacus.PrivacyEngine`` for the whole run, so its accountant composes every release: each
    round's local training (``make_private`` afresh on that round's model, optimiser and Poisson-sampled loader),
    the victim's audit gradient, and the reads listed in ``cover``. With ``target_epsilon``, each client's noise
    multiplier is calibrated to its whole planned schedule (every round, the audit gradient when it is the victim,
    the covered reads), so a client that joins every round spends between 0.98 and 1 times the target. Reads not
    covered (GENE-FL's Fisher pass, the clustering subspace, unless listed) are exact and reported as uncovered.

    Args:
        noise_multiplier: sigma; ignored when ``target_epsilon`` is set.
        target_epsilon: if set, sigma is chosen per client so that its planned schedule
            spends at most this epsilon.
        max_grad_norm: per-sample clipping norm C (also the Fisher pass's clipping norm).
        delta: target delta.
        accountant: ``rdp`` or ``prv``.
        cover: other reads to protect and account: ``fisher_diagonal`` (Gaussian noise on
            clipped per-sample squared gradients), ``subspace`` (DP-PCA).
    """

    name = "dpsgd"

    def __init__(self, *, noise_multiplier: Annotated[float, Number(low=0, high=1e4)] = 1.0,
                 target_epsilon: Annotated[float | None, Number(low=0, high=1e6, open_low=True, nullable=True)] = None,
                 max_grad_norm: ClipNorm = 1.0, delta: Probability = 1e-5, accountant: str = "rdp",
                 cover: Sequence[str] = (), seed: int = 0) -> None:
        super().__init__()
        if accountant not in ACCOUNTANTS:
            raise ConfigError(f"defense.accountant={accountant!r} is not one of {', '.join(ACCOUNTANTS)}")
        if max_grad_norm <= 0 or noise_multiplier < 0 or not 0 < delta < 1:
            raise ConfigError("defense: max_grad_norm must be > 0, noise_multiplier >= 0, delta in (0, 1)")
        if target_epsilon is not None and target_epsilon <= 0:
            raise ConfigError(f"defense.target_epsilon must be > 0, got {target_epsilon}")
        unknown = sorted(set(cover) - set(COVERABLE))
        if unknown:
            raise ConfigError(f"defense.cover: {unknown[0]!r} is not one of {', '.join(COVERABLE)}")
        self.noise_multiplier, self.target_epsilon = noise_multiplier, target_epsilon
        self.max_grad_norm, self.delta, self.accountant, self.seed = max_grad_norm, delta, accountant, seed
        self.clip_norm = max_grad_norm
        self.cover = tuple(c for c in COVERABLE if c in cover)
        #: a one-run audit's gradient canaries, appended to every local step's records (None: no audit)
        self.canaries: GradientCanaries | None = None
        self.engines: dict[str, Any] = {}
        self.sigmas: dict[str, float] = {}
        self._calibrated: dict[tuple[Event, ...], float] = {}

    def check_model(self, model: nn.Module) -> None:
        """Fail before training if Opacus cannot compute per-sample gradients of ``model``."""
        from opacus.validators import ModuleValidator

        errors = ModuleValidator.validate(model, strict=False)
        if errors:
            raise ConfigError(f"defense=dpsgd cannot train {type(model).__name__}: {str(errors[0]).splitlines()[0]}; "
                              "use a GroupNorm model (model.norm=gn for resnet18, or model=convnet/lenet)")

    def plan(self, client: str, reads: Sequence[PlannedRead]) -> None:
        """Fix ``client``'s noise multiplier for its planned schedule of releases.

        Refuses, before any compute, a ``delta`` of at least ``1/n`` for a client of ``n`` samples (it would
        let a mechanism release a record outright, and RDP conversion reports a negative epsilon) and a
        noise multiplier whose planned epsilon is no number.
        """
        largest = max((r.num_samples for r in reads), default=0)
        if largest and self.delta >= 1 / largest:
            raise ConfigError(f"defense.delta={self.delta:g}: must be below 1/n = {1 / largest:.3g} for {client}'s "
                              f"{largest} samples")
        schedule = events(reads, covered=self.cover)
        if self.target_epsilon is None:
            if self.noise_multiplier > 0:
                try:
                    spent = epsilon(self.noise_multiplier, schedule, delta=self.delta, accountant=self.accountant)
                except (ArithmeticError, ValueError):  # the accountant's arithmetic breaks down
                    spent = math.nan
                if not math.isfinite(spent) or spent < 0:
                    raise ConfigError(f"defense.noise_multiplier={self.noise_multiplier:g}: {client}'s planned epsilon "
                                      f"cannot be computed ({spent}); use 0 (no noise) or a multiplier in [1e-3, 1e4]")
            self.sigmas[client] = self.noise_multiplier
            return
        key = tuple(schedule)
        if key not in self._calibrated:  # clients of equal size share a schedule
            self._calibrated[key] = noise_multiplier(schedule, target_epsilon=self.target_epsilon, delta=self.delta,
                                                     accountant=self.accountant)
        self.sigmas[client] = self._calibrated[key]

    def planned_steps(self, n: int, sgd: LocalSGD) -> int:
        """The steps ``train`` takes on ``n`` samples: ``epochs`` x Opacus' loader length, ``poisson_steps``."""
        return sgd.epochs * poisson_steps(-(-n // sgd.batch_size))

    def sigma(self, client: str) -> float:
        """Noise multiplier of ``client`` (set by ``plan``; ``noise_multiplier`` without a target)."""
        if client not in self.sigmas:
            if self.target_epsilon is not None:
                raise RuntimeError(f"{client} has no planned schedule: call plan() before its first release")
            self.sigmas[client] = self.noise_multiplier
        return self.sigmas[client]

    def engine(self, client: str) -> Any:
        """The persistent Opacus ``PrivacyEngine`` (and accountant) of ``client``."""
        from opacus import PrivacyEngine

        if client not in self.engines:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Secure RNG turned off": runs are seeded on purpose
                self.engines[client] = PrivacyEngine(accountant=self.accountant)
        return self.engines[client]

    def _protection(self, what: str) -> dict[str, Any]:
        if what in (LOCAL_SGD, AUDIT_GRADIENT) or what in self.cover:
            return {"mechanism": MECHANISMS[what], "covered": True}
        return {"mechanism": "none (exact)", "covered": False}

    def _train(self, model: nn.Module, data: ImageDataset, *, client: str, sgd: LocalSGD, generator: torch.Generator,
               regulariser: Regulariser | None) -> int:
        """DP-SGD local training of ``model`` in place; returns the number of optimiser steps.

        An empty Poisson batch still takes a step (noise only), as Opacus intends.
        """
        loader = DataLoader(TensorDataset(data.normalised(), data.labels), batch_size=sgd.batch_size,
                            generator=generator)
        optimizer = torch.optim.SGD(model.parameters(), lr=sgd.lr, momentum=sgd.momentum)
        device = next(model.parameters()).device  # Opacus draws its noise on the model's device
        noise = torch.Generator(device=device).manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module, dp_optimizer, dp_loader = self.engine(client).make_private(
                module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=self.sigma(client),
                max_grad_norm=self.max_grad_norm, poisson_sampling=True, noise_generator=noise)
        module.train()
        if self.canaries is not None:  # a one-run audit: its canaries are records too
            self.canaries.attach(module, dp_optimizer)
        steps = 0
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")  # inputs need no grad here
            for _ in range(sgd.epochs):
                for x, y in dp_loader:
                    dp_optimizer.zero_grad(set_to_none=True)
                    # an empty batch gives empty per-sample gradients (its NaN mean loss has no terms)
                    F.cross_entropy(module(x), y).backward()
                    if self.canaries is not None:
                        self.canaries.sample(rate=float(getattr(dp_loader, "sample_rate", 1.0 / len(dp_loader))))
                    if dp_optimizer.pre_step():  # clip per sample, add noise, average
                        if regulariser is not None:  # reads no data: outside the clipping
                            backpropagated_penalty_(model, regulariser)
                        dp_optimizer.original_optimizer.step()
                        if regulariser is not None:
                            regulariser.after_step_(model, sgd.lr)
                    steps += 1
        module._close()
        return steps

    def _gradient(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, client: str,
                  generator: torch.Generator) -> dict[str, torch.Tensor]:
        """One DP-SGD step's gradient on a fixed batch: clipped per-sample gradients, summed, noised, averaged.

        The batch was chosen, not Poisson-sampled, so it is accounted at sample rate 1.
        """
        per_sample = per_sample_gradients(model, x, y, clip=self.max_grad_norm)
        sigma = self.sigma(client)
        out = {}
        for n, g in per_sample.items():
            noise = torch.randn(g.shape[1:], generator=generator).to(g.device) * sigma * self.max_grad_norm
            out[n] = (g.sum(0) + noise) / len(x)
        self.engine(client).accountant.step(noise_multiplier=sigma, sample_rate=1.0)
        return out

    def _fisher(self, model: nn.Module, data: ImageDataset, *, client: str,
                generator: torch.Generator) -> dict[str, torch.Tensor]:
        if FISHER not in self.cover:
            return super()._fisher(model, data, client=client, generator=generator)
        sigma = self.sigma(client)
        out = dp_fisher_diagonal(model, data, clip=self.max_grad_norm, sigma=sigma, generator=generator)
        self.engine(client).accountant.step(noise_multiplier=sigma, sample_rate=1.0)
        return out

    def _subspace(self, images: torch.Tensor, d: int, *, labels: torch.Tensor | None, client: str,
                  generator: torch.Generator) -> torch.Tensor:
        """DP-PCA when covered.

        Per class (PACFL) the classes partition the images, so the per-class releases compose
        in parallel and one release is accounted; which classes a client holds is treated as
        public, as in PACFL.
        """
        if SUBSPACE not in self.cover:
            return super()._subspace(images, d, labels=labels, client=client, generator=generator)
        sigma = self.sigma(client)

        def basis(x: torch.Tensor, k: int) -> torch.Tensor:
            return dp_subspace(x, d, sigma=sigma, generator=generator)

        out = basis(images, d) if labels is None else per_class_subspace(images, labels, d, basis)
        self.engine(client).accountant.step(noise_multiplier=sigma, sample_rate=1.0)
        return out

    def _report(self, client: str) -> dict[str, Any]:
        """The reads since the last report and ``client``'s accountant events since then (``[sigma, sample rate,
        steps]`` each); this process's accountant for ``client`` restarts empty (the server's record composes them)."""
        report = super()._report(client)
        engine = self.engines.get(client)
        report["events"] = [[float(s), float(q), int(n)] for s, q, n in (engine.accountant.history if engine else [])]
        if engine is not None:
            engine.accountant.history.clear()
        return report

    def compose_report(self, client: str, report: str | None, *, planned: Sequence[PlannedRead]) -> dict[str, Any]:
        """Compose a remote client's accountant events into the server's accountant of ``client``: each must use
        the noise multiplier the server planned for it, and together they must be the events the server derives from
        the reads it ``planned`` for the task (per sample rate, the same steps); so the accountant only ever composes
        the planned schedule, and a client cannot report fewer steps or a smaller sample rate than it was asked for."""
        parsed = super().compose_report(client, report, planned=planned)
        reported = parsed.get("events")
        if not isinstance(reported, list) or len(reported) > 10_000:
            raise ValueError("its record of reads carries no list of DP-SGD accountant events")
        sigma_planned = self.sigma(client)
        checked = []
        for event in reported:
            if not (isinstance(event, list) and len(event) == 3 and all(isinstance(v, (int, float)) for v in event)
                    and not isinstance(event[2], bool) and float(event[2]).is_integer()):
                raise ValueError(f"an accountant event {str(event)[:60]} is not [sigma, sample rate, steps]")
            sigma, rate, steps = float(event[0]), float(event[1]), int(event[2])
            if not math.isclose(sigma, sigma_planned, rel_tol=1e-12, abs_tol=0.0):
                raise ValueError(f"it reports noise multiplier {sigma:.6g}; the server planned {sigma_planned:.6g} for "
                                 f"{client}")
            if not 0 < rate <= 1 or not 1 <= steps <= 10**7:
                raise ValueError(f"an accountant event has sample rate {rate:g} and {steps} steps: the rate must be in "
                                 "(0, 1] and the steps 1 to 10^7")
            checked.append((sigma, rate, steps))
        expected, got = dict(events(planned, covered=self.cover)), steps_by_rate((q, n) for _, q, n in checked)
        if got != expected:
            raise ValueError(f"it reports accountant events of {shown(got)}; the server planned {shown(expected)} "
                             f"for {client}'s task")
        history = self.engine(client).accountant.history
        for sigma, rate, steps in checked:  # merged as Opacus merges its own steps, so in-process runs compare exactly
            if history and history[-1][:2] == (sigma, rate):
                history[-1] = (sigma, rate, history[-1][2] + steps)
            else:
                history.append((sigma, rate, steps))
        return parsed

    def epsilons(self) -> dict[str, float]:
        """Epsilon each client has spent so far at ``delta``."""
        return {c: float(e.accountant.get_epsilon(delta=self.delta)) if len(e.accountant) else 0.0
                for c, e in sorted(self.engines.items())}

    def tpr_bounds(self, client: str, fprs: Sequence[float]) -> list[float]:
        """The highest TPR at each FPR that any membership test on one of ``client``'s records can reach against
        what its accountant recorded (``defenses.tradeoff.tpr_bound``); chance where it released nothing."""
        engine = self.engines.get(client)
        history = list(engine.accountant.history) if engine is not None else []
        return tpr_bound([(float(s), float(q), int(n)) for s, q, n in history], fprs)

    def describe(self) -> dict[str, Any]:
        eps = self.epsilons()
        return {"defense": self.name, "max_grad_norm": self.max_grad_norm, "delta": self.delta,
                "accountant": self.accountant, "target_epsilon": self.target_epsilon, "cover": list(self.cover),
                "noise_multiplier": self.noise_multiplier if self.target_epsilon is None else None,
                "noise_multipliers": dict(sorted(self.sigmas.items())),
                "epsilon_per_client": eps, EPSILON_MAX.key: max(eps.values()) if eps else math.nan}

