"""White-box gradient canaries for a one-run DP audit (Steinke, Nasr and Jagielski, 2023).

Each included canary is one more record of the client's data whose per-sample gradient is a Dirac: ``magnitude``
on one coordinate of one parameter, zero elsewhere. It is Poisson-sampled into each DP-SGD batch at the data's
own rate (``sample``), clipped by the mechanism and summed with the real samples before the noise, so it is a
record like any other for the mechanism and its accountant. A Dirac's row is sparse: instead of appending dense
rows to Opacus's per-sample gradients (canaries x parameters floats: 31 GB for 50,000 canaries of FedAvg's 2NN),
``attach`` makes the optimiser's ``clip_and_accumulate`` clip and sum the real samples, then run once more on a
single canary row, which gives the factor the mechanism itself applies to a row of the canaries' norm (every
Dirac has the same norm), and add each sampled canary's coordinate times that factor to the clipped sum. A
mechanism that stops clipping therefore leaves the canaries unclipped too, as it would dense rows (the same sum as
dense rows through Opacus, ``tests/test_one_run.py``).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass
class GradientCanaries:
    """The included canaries: ``coordinates[j]`` is canary j's (parameter name, flat index).

    Attributes:
        coordinates: one distinct coordinate per included canary.
        magnitude: the Dirac's height (the clip norm C: the largest a clipped record can move a coordinate).
        generator: draws each step's Poisson sample of canaries.
        sampled: how many canary rows were summed, over all steps (for the record).
    """

    coordinates: list[tuple[str, int]]
    magnitude: float
    generator: torch.Generator
    sampled: int = 0
    _picked: list[tuple[str, int]] = field(default_factory=list)

    def sample(self, *, rate: float) -> None:
        """Poisson-sample the canaries of the next step at ``rate``."""
        keep = torch.rand(len(self.coordinates), generator=self.generator) < rate
        self._picked = [c for c, k in zip(self.coordinates, keep.tolist()) if k]
        self.sampled += len(self._picked)

    def attach(self, module: nn.Module, optimizer: Any) -> None:
        """Make ``optimizer`` (an Opacus ``DPOptimizer`` of ``module``) add the sampled canaries to its clipped sum,
        clipped by its own ``clip_and_accumulate``, right after it clips and sums the real samples (before its noise)."""
        params = {name.removeprefix("_module."): p for name, p in module.named_parameters() if p.requires_grad}
        clip = type(optimizer).clip_and_accumulate

        def clip_and_accumulate() -> None:
            clip(optimizer)
            if self._picked:
                self.accumulate(params, factor=self.mechanism_factor(optimizer, clip))

        optimizer.clip_and_accumulate = clip_and_accumulate

    def mechanism_factor(self, optimizer: Any, clip: Any) -> float:
        """The factor the optimiser's clipping applies to one canary row: ``clip`` run on a batch of that single row
        (``magnitude`` on one coordinate), the clipped sum of the real samples and their rows put back after."""
        kept = [(p.grad_sample, p.summed_grad) for p in optimizer.params]
        first = optimizer.params[0]
        for p in optimizer.params:
            p.grad_sample = torch.zeros(1, *p.shape, dtype=p.dtype, device=p.device)
            p.summed_grad = None
        first.grad_sample.view(-1)[0] = self.magnitude
        clip(optimizer)
        factor = float(first.summed_grad.reshape(-1)[0]) / self.magnitude
        for p, (grad_sample, summed) in zip(optimizer.params, kept):
            p.grad_sample, p.summed_grad = grad_sample, summed
        return factor

    def accumulate(self, params: dict[str, nn.Parameter], *, factor: float) -> None:
        """Add the sampled canaries' Diracs, times the mechanism's ``factor``, to each parameter's ``summed_grad``."""
        by_name: dict[str, list[int]] = defaultdict(list)
        for name, index in self._picked:
            by_name[name].append(index)
        for name, indices in by_name.items():
            p = params.get(name)
            if p is None:
                continue
            summed = getattr(p, "summed_grad", None)
            flat = (torch.zeros_like(p) if summed is None else summed).reshape(-1).clone()
            rows = torch.tensor(indices, dtype=torch.long, device=flat.device)
            flat.index_add_(0, rows, torch.full((len(indices),), self.magnitude * factor, dtype=flat.dtype,
                                                device=flat.device))
            p.summed_grad = flat.view_as(p)  # type: ignore[attr-defined]
        self._picked = []
