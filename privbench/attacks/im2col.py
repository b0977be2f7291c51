"""Small convolutions as im2col matrix products, which twice-differentiate faster than native CPU convolutions.

A gradient-inversion objective differentiates the model twice. For a small convolution (batch 1,
a few channels) the native CPU kernels and their double backward are mostly per-call overhead;
``unfold`` + ``matmul`` computes the same convolution, and its first and second derivatives are
again ``fold``/``unfold`` and matrix products. Measured on LeNet at batch 1, one thread, an
objective evaluation costs about half as much (``benchmarks/attack_speed.py``). Large
convolutions stay native, where the column matrix would cost more than it saves.
"""
from __future__ import annotations

import copy
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

#: Largest column matrix (batch x in_channels x kernel area x output positions) computed by im2col:
#: below it im2col was faster on LeNet- and ConvNet-sized layers, above it slower (2-core CPU).
MAX_COLUMNS = 32_768


class Im2colConv2d(nn.Conv2d):
    """``nn.Conv2d`` (zero padding, one group) computed as ``unfold`` + ``matmul``; same parameters and names.

    Example:
        >>> conv = nn.Conv2d(1, 2, 3, padding=1)
        >>> x = torch.randn(1, 1, 5, 5)
        >>> torch.allclose(Im2colConv2d.like(conv)(x), conv(x), atol=1e-6)
        True
    """

    @classmethod
    def like(cls, conv: nn.Conv2d) -> "Im2colConv2d":
        """A copy of ``conv`` (sharing nothing) that computes by im2col."""
        new = cls(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,  # type: ignore[arg-type]
                  padding=conv.padding, dilation=conv.dilation, bias=conv.bias is not None,  # type: ignore[arg-type]
                  device=conv.weight.device, dtype=conv.weight.dtype)
        new.load_state_dict(conv.state_dict())
        new.train(conv.training)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        (kh, kw), (sh, sw), (dh, dw) = self.kernel_size, self.stride, self.dilation
        ph, pw = cast(tuple[int, int], self.padding)
        cols = F.unfold(x, (kh, kw), dilation=(dh, dw), padding=(ph, pw), stride=(sh, sw))
        out = self.weight.flatten(1) @ cols
        if self.bias is not None:
            out = out + self.bias[:, None]
        return out.view(n, self.out_channels, (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1,
                        (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1)


def _eligible(conv: nn.Module) -> bool:
    return (type(conv) is nn.Conv2d and conv.groups == 1 and conv.padding_mode == "zeros"
            and isinstance(conv.padding, tuple))


def with_im2col(model: nn.Module, example: torch.Tensor, *, max_columns: int = MAX_COLUMNS) -> tuple[nn.Module, list[str]]:
    """A copy of ``model`` whose small convolutions at input ``example`` compute by im2col, and their names.

    A convolution qualifies when it is a plain ``nn.Conv2d`` (one group, zero padding) and its
    column matrix at ``example`` has at most ``max_columns`` entries. The choice depends only
    on shapes, so the same target always gets the same model.
    """
    model = copy.deepcopy(model)
    sizes: dict[str, int] = {}
    hooks = []
    for name, module in model.named_modules():
        if _eligible(module):
            def record(mod: nn.Conv2d, args: tuple[torch.Tensor, ...], out: torch.Tensor, name: str = name) -> None:
                (n, c), (kh, kw) = args[0].shape[:2], mod.kernel_size
                sizes[name] = int(n * c * out.shape[2] * out.shape[3] * kh * kw)
            hooks.append(module.register_forward_hook(record))
    training = model.training
    try:
        with torch.no_grad():
            model.eval()  # the probe must not move batch-norm statistics
            model(example)
    finally:
        model.train(training)
        for hook in hooks:
            hook.remove()
    chosen = [name for name, size in sizes.items() if size <= max_columns]
    for name in chosen:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, Im2colConv2d.like(getattr(parent, child)))
    return model, chosen
