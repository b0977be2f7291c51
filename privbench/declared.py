"""What a user's file holds, checked against what it is declared to be, before an attack reads it.

Three silent wrong answers of attacking a file are refused or flagged here:

- **weights declared a gradient** (or a gradient declared weights): a client's weights after training lie close
  to the weights it started from (``--base``), a gradient does not; without ``--base``, a softmax cross-entropy
  gradient's last-layer bias sums to zero (each sample's ``softmax - onehot`` does), a model's bias does not.
- **a truth of another size than the message**: scoring 8 true images against a 1-image gradient makes it a
  best-of-8 match.
- **chance from foreign images**: chance is scored against a pool of non-member images; when the true images do
  not look like that pool (their nearest-neighbour PSNR to it below what the pool's own images reach), the chance
  level is not the truth's and the gain is inflated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from privbench.errors import ConfigError

#: A gradient lies about its base's norm away from the base; weights trained from it lie within this fraction.
WEIGHTS_WITHIN = 0.5
#: A model payload's norm is about its base's; below this fraction of it, the file holds a gradient or a difference.
MODEL_NORM_AT_LEAST = 0.5
#: A cross-entropy gradient's last-layer bias sums to 0 up to rounding; above this share of its L1 norm it does not.
ZERO_SUM = 1e-3
#: Fewest pool images whose likeness to the truth ``resemblance`` judges (half of them are held out as reference).
MIN_POOL = 40


def _norm(tensors: dict[str, torch.Tensor], names: list[str]) -> float:
    return math.sqrt(sum(float(tensors[n].double().pow(2).sum()) for n in names))


def _distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], names: list[str]) -> float:
    return math.sqrt(sum(float((a[n].double() - b[n].double()).pow(2).sum()) for n in names))


def head_bias(model: nn.Module) -> str | None:
    """The name of the output layer's bias when the model ends in a linear layer that gives the logits (its bias is
    the last parameter), else None: only there does a cross-entropy gradient's bias sum to 0."""
    params = list(model.named_parameters())
    layers = [(name, m) for name, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))]
    if not params or not layers or not isinstance(layers[-1][1], nn.Linear) or layers[-1][1].bias is None:
        return None
    name, last = params[-1]
    return name if last is layers[-1][1].bias else None


def check_kind(kind: str, carries: str, tensors: dict[str, torch.Tensor], *, base: dict[str, torch.Tensor] | None,
               model: nn.Module, what: str, noisy: bool = False) -> None:
    """Refuse a file whose tensors are not what ``kind`` declares (``carries``: ``gradient`` or ``model``). A
    ``noisy`` gradient (DP-SGD's, ``--clip``) is judged only against ``--base``: its bias need not sum to 0.

    Example:
        >>> from privbench.models import LeNet
        >>> net = LeNet(in_channels=1, image_size=8, num_classes=3)
        >>> weights = {n: p.detach().clone() for n, p in net.named_parameters()}
        >>> try:
        ...     check_kind("gradient", "gradient", weights, base=weights, model=net, what="w.pt")
        ... except ConfigError as refused:
        ...     print(str(refused)[:67])
        w.pt: declared a gradient (--kind gradient), but its tensors lie 0%
    """
    names = [n for n in tensors if base is not None and n in base]
    if carries == "gradient" and names:
        assert base is not None
        away = _distance(tensors, base, names) / max(_norm(base, names), 1e-30)
        if away < WEIGHTS_WITHIN:
            raise ConfigError(f"{what}: declared a gradient (--kind {kind}), but its tensors lie {away:.0%} of --base's "
                              "norm from --base, as a client's weights after training do (a gradient lies "
                              "about 100 % away); for weights give --kind update and the client's training (--lr, "
                              "--epochs, --local-batch-size); if it is a gradient, --kind-check off")
    elif carries == "gradient" and not noisy:
        bias = head_bias(model)
        fresh = {n: p.detach() for n, p in model.named_parameters()}
        common = [n for n in tensors if n in fresh]
        if bias is None or bias not in tensors or not common:
            return
        b = tensors[bias].double()
        share = float(b.sum().abs()) / max(float(b.abs().sum()), 1e-30)
        ratio = _norm(tensors, common) / max(_norm(fresh, common), 1e-30)
        if share > ZERO_SUM and 1 / 3 < ratio < 3:
            raise ConfigError(f"{what}: declared a gradient (--kind {kind}), but its last-layer bias ({bias}) sums to "
                              f"{share:.1%} of its size, where a cross-entropy gradient's sums to 0, and its norm is "
                              f"{ratio:.2f} of a fresh model's weights: it looks like weights; give --kind update with "
                              "--base (the weights the client started from) and its training; a DP-SGD gradient "
                              "(noise breaks the sum): declare --clip or give --base; another loss: --kind-check off")
    elif carries == "model" and names:
        assert base is not None
        ratio = _norm(tensors, names) / max(_norm(base, names), 1e-30)
        if ratio < MODEL_NORM_AT_LEAST:
            raise ConfigError(f"{what}: declared a model (--kind {kind}), but its norm is {ratio:.2f} of --base's, "
                              "where a client's weights after training keep about their starting norm: it looks like "
                              "a gradient or a weight difference; give the weights after training (base + "
                              "difference), or --kind gradient; if it is weights, --kind-check off")


def check_truth_count(truth: int, declared: int, *, what: str) -> None:
    """The truth must hold as many images as the message was computed from (``--batch-size``)."""
    if truth != declared:
        raise ConfigError(f"{what} holds {truth} images but --batch-size is {declared}: the attack rebuilds "
                          f"{declared} and scoring them against {truth} would be a best-of-{max(truth, declared)} "
                          "match; give the images the message was computed from, and their number as --batch-size")


@dataclass(frozen=True)
class Resemblance:
    """How the true images sit in a pool of non-members: the truth's median nearest-neighbour PSNR to the pool, and
    the pool's own images' 1 % quantile of that median (over random sets of as many images)."""

    truth_db: float
    pool_quantile_db: float

    @property
    def alike(self) -> bool:
        return self.truth_db >= self.pool_quantile_db


def _nearest_psnr(images: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
    """Each image's PSNR (peak 1) to its nearest image of ``pool`` (both ``[N, ...]`` in [0, 1])."""
    a, b = images.flatten(1).double(), pool.flatten(1).double()
    mse = torch.cdist(a, b).pow(2) / a.shape[1]
    return 10 * torch.log10(1 / mse.min(dim=1).values.clamp_min(1e-12))


def resemblance(truth: torch.Tensor, pool: torch.Tensor, *, seed: int, reference: int = 200,
                draws: int = 1000) -> Resemblance:
    """Whether ``truth`` looks like ``pool`` (both ``[N, C, H, W]`` in [0, 1]): ``reference`` pool images, held out,
    give the null distribution of the median nearest-neighbour PSNR of ``len(truth)`` images to the rest.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> pool = torch.rand(400, 1, 4, 4, generator=g) * 0.2
        >>> resemblance(pool[:5] * 0.9, pool[5:], seed=0).alike, resemblance(1 - pool[:5], pool[5:], seed=0).alike
        (True, False)
    """
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(pool), generator=g)
    held = min(reference, len(pool) // 2)
    ref, rest = pool[order[:held]], pool[order[held:]]
    ref_db = _nearest_psnr(ref, rest)
    truth_db = float(_nearest_psnr(truth, rest).median())
    n = min(len(truth), held)
    picks = torch.stack([torch.randperm(held, generator=g)[:n] for _ in range(draws)])
    medians = ref_db[picks].median(dim=1).values
    return Resemblance(truth_db=truth_db, pool_quantile_db=float(torch.quantile(medians, 0.01)))
