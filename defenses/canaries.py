"""White-box gradient canaries for a one-run DP audit (Steinke, Nasr and Jagielski, 2023).

Each included canary is one more record of the client's data whose per-sample gradient is a Dirac: ``magnitude``
on one coordinate of one parameter, zero elsewhere. It is Poisson-sampled into each DP-SGD batch at the data's
own rate, then clipped, summed and noised with the real samples, so it is a record like any other for the
mechanism and its accountant. ``DPSGD`` appends the sampled canaries' rows to every parameter's per-sample
gradients (``append``) before Opacus clips them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class GradientCanaries:
    """The included canaries: ``coordinates[j]`` is canary j's (parameter name, flat index).

    Attributes:
        coordinates: one distinct coordinate per included canary.
        magnitude: the Dirac's height (the clip norm C: the largest a clipped record can move a coordinate).
        generator: draws each step's Poisson sample of canaries.
        sampled: how many canary rows were appended, over all steps (for the record).
    """

    coordinates: list[tuple[str, int]]
    magnitude: float
    generator: torch.Generator
    sampled: int = 0

    def append(self, module: nn.Module, *, rate: float) -> None:
        """Poisson-sample the canaries at ``rate`` and append their rows to each parameter's ``grad_sample``."""
        picked = [c for c, keep in zip(self.coordinates, torch.rand(len(self.coordinates), generator=self.generator)
                                       < rate) if keep]
        if not picked:
            return
        self.sampled += len(picked)
        for name, p in module.named_parameters():
            name = name.removeprefix("_module.")
            grad_sample = getattr(p, "grad_sample", None)
            if grad_sample is None or not p.requires_grad:
                continue
            rows = torch.zeros(len(picked), p.numel(), dtype=grad_sample.dtype, device=grad_sample.device)
            for row, (target, index) in enumerate(picked):
                if target == name:
                    rows[row, index] = self.magnitude
            setattr(p, "grad_sample", torch.cat([grad_sample, rows.view(len(picked), *p.shape)]))
