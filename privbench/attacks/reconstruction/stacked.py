"""Independent inversion problems as one plain-autograd batch, each problem with its own copy of the weights.

Batched restarts (and victims) need each problem's own parameter gradient. ``torch.func.vmap``
gives that for any model, but at batch 1 its per-operator batching costs about as much as the
arithmetic it batches. A stacked model instead holds every parameter as ``[P, *shape]`` and
runs the ``P`` problems' images as one batch of ``P * n``: convolutions as batched im2col
matrix products (or grouped convolutions when large), linear layers as ``baddbmm``, GroupNorm
with per-problem affine terms. Differentiating the summed loss by the stacked weights gives
each problem's gradient, because problem ``p``'s loss depends only on slice ``p``.

Example:
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 3))
    >>> stack = StackedModel(model, [dict(model.named_parameters())] * 2)
    >>> x = torch.randn(2, 1, 1, 4, 4)
    >>> torch.allclose(stack(x)[1], model(x[1]), atol=1e-6)
    True
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from privbench.attacks.im2col import Im2colConv2d

#: Convolutions costing at most this many multiply-adds per image run as im2col products; larger ones as
#: grouped convolutions. Measured on LeNet's and ConvNet's layers with 8 problems (2-core CPU):
#: LeNet's (at most 176k) were faster by im2col, ConvNet's (226k and more) grouped.
MAX_IM2COL_MACS = 200_000


def _out_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


class StackedConv2d(nn.Conv2d):
    """``nn.Conv2d`` whose ``weight`` is ``[P, out, in, kh, kw]`` and input ``[P * n, in, h, w]`` (problem-major)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        problems, n = self.weight.shape[0], x.shape[0] // self.weight.shape[0]
        (kh, kw), (sh, sw), (dh, dw) = self.kernel_size, self.stride, self.dilation
        ph, pw = cast(tuple[int, int], self.padding)
        oh, ow = _out_size(x.shape[2], kh, sh, ph, dh), _out_size(x.shape[3], kw, sw, pw, dw)
        if self.out_channels * self.in_channels * kh * kw * oh * ow <= MAX_IM2COL_MACS:
            cols = F.unfold(x, (kh, kw), dilation=(dh, dw), padding=(ph, pw), stride=(sh, sw))
            out = self.weight.flatten(2).unsqueeze(1) @ cols.view(problems, n, *cols.shape[1:])
            if self.bias is not None:
                out = out + self.bias.view(problems, 1, -1, 1)
            return out.view(problems * n, self.out_channels, oh, ow)
        grouped = x.view(problems, n, *x.shape[1:]).transpose(0, 1).reshape(n, problems * x.shape[1], *x.shape[2:])
        out = F.conv2d(grouped, self.weight.flatten(0, 1), None if self.bias is None else self.bias.flatten(),
                       self.stride, self.padding, self.dilation, groups=problems)
        return out.view(n, problems, self.out_channels, oh, ow).transpose(0, 1).reshape(problems * n, self.out_channels,
                                                                                         oh, ow)


class StackedLinear(nn.Linear):
    """``nn.Linear`` whose ``weight`` is ``[P, out, in]`` and input ``[P * n, in]``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        problems = self.weight.shape[0]
        rows, bias = x.view(problems, x.shape[0] // problems, -1), cast("torch.Tensor | None", self.bias)
        if bias is None:
            return (rows @ self.weight.transpose(1, 2)).flatten(0, 1)
        return torch.baddbmm(bias.unsqueeze(1), rows, self.weight.transpose(1, 2)).flatten(0, 1)


class StackedGroupNorm(nn.GroupNorm):
    """``nn.GroupNorm`` whose affine ``weight`` and ``bias`` are ``[P, channels]`` (normalisation is per sample)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.group_norm(x, self.num_groups, eps=self.eps)
        if not self.affine:
            return y
        problems, rest = self.weight.shape[0], [1] * (x.dim() - 2)
        y = y.view(problems, x.shape[0] // problems, *x.shape[1:])
        return (y * self.weight.view(problems, 1, -1, *rest) + self.bias.view(problems, 1, -1, *rest)).view_as(x)


_STACKED: dict[type[nn.Module], type[nn.Module]] = {nn.Conv2d: StackedConv2d, Im2colConv2d: StackedConv2d,
                                                    nn.Linear: StackedLinear, nn.GroupNorm: StackedGroupNorm}


def unstackable(model: nn.Module) -> str | None:
    """Why ``model`` cannot run stacked, or None: every parameter must sit in a plain ``nn.Conv2d``
    (one group, zero padding), ``nn.Linear`` or ``nn.GroupNorm``, and the model must hold no buffers
    (batch norm mixes a batch's samples)."""
    if any(True for _ in model.buffers()):
        return "the model holds buffers (batch norm)"
    for name, module in model.named_modules():
        if not any(True for _ in module.parameters(recurse=False)):
            continue
        if type(module) not in _STACKED:
            return f"{name or 'the model'} ({type(module).__name__}) has no stacked form"
        if isinstance(module, nn.Conv2d) and (module.groups != 1 or module.padding_mode != "zeros"
                                              or not isinstance(module.padding, tuple)):
            return f"{name} is a grouped, padded-by-mode or 'same'-padded convolution"
    return None


class StackedModel:
    """``model`` run for ``P`` problems at once, problem ``p`` with the parameters ``params[p]``.

    Call it with images ``[P, n, *image]``; it returns logits ``[P, n, classes]``. ``watch(names)``
    makes those stacked parameters leaves that require grad, so ``autograd.grad`` of a sum of
    per-problem losses gives each problem's gradient as ``[P, *shape]``.
    """

    def __init__(self, model: nn.Module, params: Sequence[Mapping[str, torch.Tensor]]) -> None:
        why = unstackable(model)
        if why is not None:
            raise ValueError(f"cannot stack {type(model).__name__}: {why}")
        self.module = copy.deepcopy(model)
        for module in self.module.modules():
            if type(module) in _STACKED:
                module.__class__ = _STACKED[type(module)]
        self.problems = len(params)
        self.params = {k: torch.stack([p[k].detach() for p in params]) for k, _ in model.named_parameters()}

    @classmethod
    def from_stacked(cls, model: nn.Module, params: Mapping[str, torch.Tensor]) -> "StackedModel":
        """``model`` run with parameters already stacked ``[P, *shape]`` by name (every parameter of ``model``)."""
        first = {n: t[0] for n, t in params.items()}
        stack = cls(model, [first])
        stack.problems = next(iter(params.values())).shape[0]
        stack.params = {n: params[n] for n in stack.params}
        return stack

    def watch(self, names: list[str]) -> list[torch.Tensor]:
        """The stacked parameters ``names`` as leaves requiring grad (the gradients an attack matches)."""
        for k in names:
            self.params[k] = self.params[k].detach().requires_grad_(True)
        return [self.params[k] for k in names]

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        out = functional_call(self.module, self.params, (images.flatten(0, 1),))
        return out.view(self.problems, images.shape[1], *out.shape[1:])
