"""Sample-weighted averaging of uploads that may carry different subsets of names."""
from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch


def aggregate(base: dict[str, torch.Tensor], uploads: Sequence[tuple[int, dict[str, torch.Tensor]]]) -> dict[str, torch.Tensor]:
    """Average each name over the uploads that carry it, weighted by sample count.

    Names that no upload carries keep their ``base`` value; integer tensors (e.g.
    BatchNorm's ``num_batches_tracked``) take the largest uploaded value.

    Example:
        >>> base = {"a": torch.zeros(1), "b": torch.zeros(1)}
        >>> aggregate(base, [(1, {"a": torch.ones(1)}), (3, {"a": torch.full((1,), 5.0)})])["a"]
        tensor([4.])
    """
    out = {name: t.clone() for name, t in base.items()}
    for name in base:
        carried = [(w, up[name]) for w, up in uploads if name in up]
        if not carried:
            continue
        if not base[name].is_floating_point():
            out[name] = torch.stack([t for _, t in carried]).max(0).values
            continue
        total = float(sum(w for w, _ in carried))
        out[name] = cast(torch.Tensor, sum(t.double() * (w / total) for w, t in carried)).to(base[name].dtype)
    return out
