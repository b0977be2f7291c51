"""Opacus DP-SGD inside every client's local training, one persistent accountant per client."""
from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils.data import DataLoader, TensorDataset

from privbench.data.dataset import ImageDataset
from privbench.errors import ConfigError
from privbench.fl.trainer import LocalSGD, Regulariser, Trainer

ACCOUNTANTS = ("rdp", "prv")


def _add_gradient(model: nn.Module, loss: torch.Tensor) -> None:
    """Add ``d loss / d theta`` to each parameter's ``.grad`` (after DP-SGD has set it)."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p, g in zip(params, torch.autograd.grad(loss, params, allow_unused=True)):
        if g is not None:
            p.grad = g if p.grad is None else p.grad + g


class DPSGD(Trainer):
    """DP-SGD (per-sample clipping to ``max_grad_norm`` + Gaussian noise) via Opacus: a trainer.

    Each client has one ``opacus.PrivacyEngine`` for the whole run, so its accountant
    composes every round; each round calls ``make_private`` afresh on that round's model,
    optimiser and Poisson-sampled loader. GENE-FL's regularisers, given their anchor and
    Fisher diagonal, do not read data: their gradient is added after clipping and noise. The
    Fisher pass itself reads private data without noise and is *not* covered by the reported
    epsilon: the protocol declares it (``declare_read``) and ``describe()`` lists it.

    Args:
        noise_multiplier: sigma; ignored when ``target_epsilon`` is set.
        target_epsilon: if set, sigma is chosen per client so that participating in every
            round (an upper bound on its steps) spends at most this epsilon.
        max_grad_norm: per-sample clipping norm C.
        delta: target delta.
        accountant: ``rdp`` or ``prv``.
    """

    name = "dpsgd"

    def __init__(self, *, noise_multiplier: float = 1.0, target_epsilon: float | None = None, max_grad_norm: float = 1.0,
                 delta: float = 1e-5, accountant: str = "rdp", seed: int = 0) -> None:
        super().__init__()
        if accountant not in ACCOUNTANTS:
            raise ConfigError(f"defense.accountant={accountant!r} is not one of {', '.join(ACCOUNTANTS)}")
        if max_grad_norm <= 0 or noise_multiplier < 0 or not 0 < delta < 1:
            raise ConfigError("defense: max_grad_norm must be > 0, noise_multiplier >= 0, delta in (0, 1)")
        if target_epsilon is not None and target_epsilon <= 0:
            raise ConfigError(f"defense.target_epsilon must be > 0, got {target_epsilon}")
        self.noise_multiplier, self.target_epsilon = noise_multiplier, target_epsilon
        self.max_grad_norm, self.delta, self.accountant, self.seed = max_grad_norm, delta, accountant, seed
        self.engines: dict[str, Any] = {}
        self.sigmas: dict[str, float] = {}

    def check_model(self, model: nn.Module) -> None:
        """Fail before training if Opacus cannot compute per-sample gradients of ``model``."""
        from opacus.validators import ModuleValidator

        errors = ModuleValidator.validate(model, strict=False)
        if errors:
            raise ConfigError(f"defense=dpsgd cannot train {type(model).__name__}: {str(errors[0]).splitlines()[0]}; "
                              "use a GroupNorm model (model.norm=gn for resnet18, or model=convnet/lenet)")

    def sigma(self, client: str, *, sample_rate: float, max_steps: int) -> float:
        """Noise multiplier of ``client`` (fixed at its first use)."""
        if client not in self.sigmas:
            if self.target_epsilon is None:
                self.sigmas[client] = self.noise_multiplier
            else:
                from opacus.accountants.utils import get_noise_multiplier

                self.sigmas[client] = get_noise_multiplier(target_epsilon=self.target_epsilon, target_delta=self.delta,
                                                           sample_rate=sample_rate, steps=max_steps,
                                                           accountant=self.accountant)
        return self.sigmas[client]

    def engine(self, client: str) -> Any:
        """The persistent Opacus ``PrivacyEngine`` (and accountant) of ``client``."""
        from opacus import PrivacyEngine

        if client not in self.engines:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Secure RNG turned off": runs are seeded on purpose
                self.engines[client] = PrivacyEngine(accountant=self.accountant)
        return self.engines[client]

    def _train(self, model: nn.Module, data: ImageDataset, *, client: str, sgd: LocalSGD, generator: torch.Generator,
               max_steps: int, regulariser: Regulariser | None) -> int:
        """DP-SGD local training of ``model`` in place; returns the number of optimiser steps."""
        epochs, lr, batch_size, momentum = sgd.epochs, sgd.lr, sgd.batch_size, sgd.momentum
        sample_rate = min(1.0, batch_size / len(data))
        sigma = self.sigma(client, sample_rate=sample_rate, max_steps=max_steps)
        loader = DataLoader(TensorDataset(data.normalised(), data.labels), batch_size=batch_size, generator=generator)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
        noise = torch.Generator().manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module, dp_optimizer, dp_loader = self.engine(client).make_private(
                module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=sigma,
                max_grad_norm=self.max_grad_norm, poisson_sampling=True, noise_generator=noise)
        module.train()
        steps = 0
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")  # inputs need no grad here
            for _ in range(epochs):
                for x, y in dp_loader:
                    dp_optimizer.zero_grad(set_to_none=True)
                    if len(x):
                        F.cross_entropy(module(x), y).backward()
                    if dp_optimizer.pre_step():  # clip per sample, add noise, average
                        if regulariser is not None:  # data-independent: outside the clipping
                            _add_gradient(model, regulariser(model))
                        dp_optimizer.original_optimizer.step()
                    steps += 1
        module._close()
        return steps

    def _gradient(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, client: str, num_samples: int,
                  generator: torch.Generator, max_steps: int) -> dict[str, torch.Tensor]:
        """One DP-SGD step's gradient on a batch: clipped per-sample gradients, summed, noised, averaged.

        Accounted as one step of sampling rate ``len(x) / num_samples`` on the client's accountant.
        """
        params = {n: p.detach() for n, p in model.named_parameters()}
        buffers = {n: b.detach() for n, b in model.named_buffers()}

        def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(functional_call(model, (p, buffers), (xi.unsqueeze(0),)), yi.unsqueeze(0))

        per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
        norms = torch.sqrt(sum((g.flatten(1) ** 2).sum(1) for g in per_sample.values()))
        factor = (self.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
        rate = min(1.0, len(x) / num_samples)
        sigma = self.sigma(client, sample_rate=rate, max_steps=max_steps)
        out = {}
        for n, g in per_sample.items():
            summed = (g * factor.view(-1, *[1] * (g.dim() - 1))).sum(0)
            noise = torch.randn(summed.shape, generator=generator) * sigma * self.max_grad_norm
            out[n] = (summed + noise) / len(x)
        self.engine(client).accountant.step(noise_multiplier=sigma, sample_rate=rate)
        return out

    def epsilons(self) -> dict[str, float]:
        """Epsilon each client has spent so far at ``delta``."""
        return {c: float(e.accountant.get_epsilon(delta=self.delta)) if len(e.accountant) else 0.0
                for c, e in sorted(self.engines.items())}

    def describe(self) -> dict[str, Any]:
        eps = self.epsilons()
        return {"defense": self.name, "max_grad_norm": self.max_grad_norm, "delta": self.delta,
                "accountant": self.accountant, "target_epsilon": self.target_epsilon,
                "noise_multiplier": self.noise_multiplier if self.target_epsilon is None else None,
                "noise_multipliers": dict(sorted(self.sigmas.items())),
                "epsilon_per_client": eps, "epsilon_max": max(eps.values()) if eps else math.nan,
                "uncovered_reads": self.uncovered_reads()}
