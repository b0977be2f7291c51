"""Blind source separation of a fully connected layer's gradient (the Cocktail Party Attack, Kariyappa et al.,
ICML 2023): the algebra.

A linear layer's weight gradient summed over a batch, or over a cohort's one-step updates, is ``G = L^T X``
(``[m, n]``): each row mixes the batch's inputs ``X`` (``[B, n]``) with unknown weights. Centred over its ``n``
entries and whitened to its ``B`` principal components, ``G`` becomes ``Z`` (``[B, n]``), and an unmixing row
``w`` with ``w Z`` non-Gaussian picks out one input. The bias gradient ``L^T 1`` fixes each input's scale and
sign without the truth: for the unmixing row ``u`` on ``G``'s rows, ``u G / (u b)`` is the input itself once
``u`` isolates it (the paper scales and signs its images against the ground truth instead).
"""
from __future__ import annotations

import math

import torch

#: FastICA's fixed-point iterations stop when no start's direction moves by more than this (1 - |cosine|).
TOLERANCE = 1e-10
#: Two rebuilt inputs correlated above this are one.
SAME = 0.99
#: Non-Gaussianity contrasts of ``fixed_points``.
CONTRASTS = ("gauss", "logcosh")


def edges(rows: torch.Tensor, image_shape: tuple[int, ...]) -> torch.Tensor:
    """Each row of ``rows`` (``[m, C*H*W]``) read as an image and replaced by its horizontal and vertical
    differences (``[m, C*(H*(W-1) + (H-1)*W)]``): a linear map of the pixels, so it keeps the mixture, and the
    inputs' edges are sparser and less alike than the inputs."""
    images = rows.reshape(len(rows), *image_shape)
    across = images[..., :, 1:] - images[..., :, :-1]
    down = images[..., 1:, :] - images[..., :-1, :]
    return torch.cat([across.flatten(1), down.flatten(1)], 1)


def whiten(mixtures: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(K, Z, gap)``: the whitening ``K`` (``[rank, m]``) of ``mixtures`` (``[m, n]``, centred over ``n``),
    the whitened rows ``Z = K (mixtures - mean)`` (unit variance, uncorrelated) and the ratio of the next
    singular value to the ``rank``-th (near 0 when the mixtures hold ``rank`` sources)."""
    centred = mixtures.double() - mixtures.double().mean(1, keepdim=True)
    u, s, _ = torch.linalg.svd(centred, full_matrices=False)
    if len(s) < rank or s[rank - 1] <= 1e-10 * s[0]:
        raise ValueError(f"the layer's gradient holds fewer than {rank} independent inputs")
    gap = s[rank] / s[rank - 1] if len(s) > rank else torch.tensor(0.0, dtype=torch.float64)
    k = (u[:, :rank] / s[:rank]).T * math.sqrt(centred.shape[1])
    return k, k @ centred, gap


def fixed_points(z: torch.Tensor, starts: int, *, iterations: int, generator: torch.Generator,
                 contrast: str = "gauss") -> torch.Tensor:
    """One-unit FastICA (Hyvarinen 1999) from ``starts`` random unit directions at once, each left free of the
    others (the inputs are correlated, so the true unmixing is not orthogonal): ``[starts, B]`` unit rows, each a
    local maximum of the non-Gaussianity of ``w z`` under ``contrast``: ``gauss`` (``-exp(-u^2/2)``, robust for
    sparse sources such as edges) or ``logcosh``."""
    if contrast not in CONTRASTS:
        raise ValueError(f"contrast {contrast!r} is not one of {', '.join(CONTRASTS)}")
    w = torch.randn(starts, z.shape[0], generator=generator, dtype=torch.float64)
    w = w / w.norm(dim=1, keepdim=True)
    for _ in range(iterations):
        u = w @ z
        if contrast == "gauss":
            e = torch.exp(-u * u / 2)
            g, slope = u * e, (1 - u * u) * e
        else:
            g = torch.tanh(u)
            slope = 1 - g * g
        step = g @ z.T / z.shape[1] - slope.mean(1, keepdim=True) * w
        step = step / step.norm(dim=1, keepdim=True).clamp(min=1e-300)
        moved = float((1 - (step * w).sum(1).abs()).max())
        w = step
        if moved < TOLERANCE:
            break
    return w


def paper_unmixing(z: torch.Tensor, mean: torch.Tensor, image_shape: tuple[int, ...], *, steps: int, lr: float,
                   temperature: float, decorrelation: float, total_variation: float,
                   negentropy: float) -> torch.Tensor:
    """The paper's unmixing: ``[B, B]`` unit rows, from the identity, optimised with Adam to maximise the
    non-Gaussianity of ``w z`` (``E[log cosh]^2``) less ``total_variation`` times the rebuilt images' total
    variation, less ``decorrelation`` times ``E exp(temperature |cos(w_i, w_j)|)``. ``mean`` (``[B, n]``) is the
    whitened row mean added back before the total variation is taken."""
    rank = z.shape[0]
    w = torch.eye(rank, dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.Adam([w], lr=lr)
    off = ~torch.eye(rank, dtype=torch.bool)
    for _ in range(steps):
        optimiser.zero_grad()
        unit = w / w.norm(dim=1, keepdim=True)
        sources = unit @ z
        loss = -negentropy * torch.log(torch.cosh(sources)).mean(1).pow(2).mean()
        loss = loss + decorrelation * torch.exp(temperature * (unit @ unit.T)[off].abs()).mean()
        if total_variation:
            images = (sources + unit @ mean).reshape(rank, *image_shape)
            loss = loss + total_variation * ((images[..., :, 1:] - images[..., :, :-1]).abs().mean()
                                             + (images[..., 1:, :] - images[..., :-1, :]).abs().mean())
        loss.backward()
        optimiser.step()
    return (w / w.norm(dim=1, keepdim=True)).detach()


def as_inputs(unmixing: torch.Tensor, weight_grad: torch.Tensor, bias_grad: torch.Tensor) -> torch.Tensor:
    """``u G / (u b)`` for each unmixing row ``u`` on the gradient's rows: the inputs, at their own scale and sign
    when ``u`` isolates one (``[k, n]``, float64)."""
    numerator = unmixing @ weight_grad.double()
    denominator = unmixing @ bias_grad.double()
    tiny = 1e-12 * denominator.abs().max().clamp(min=1e-300)
    denominator = torch.where(denominator.abs() < tiny, tiny.copysign(denominator), denominator)
    return numerator / denominator[:, None]


def violation(inputs: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """Mean distance of each row's entries outside ``[low, high]`` (a rebuilt input that mixes several lies
    outside the pixel range: the attacker's own ranking, no truth used)."""
    return (torch.relu(low - inputs) + torch.relu(inputs - high)).mean(1)


def distinct(inputs: torch.Tensor, order: torch.Tensor, count: int) -> list[int]:
    """Up to ``count`` rows of ``inputs`` taken in ``order``, skipping one correlated above ``SAME`` with a row taken."""
    centred = inputs - inputs.mean(1, keepdim=True)
    unit = centred / centred.norm(dim=1, keepdim=True).clamp(min=1e-300)
    kept: list[int] = []
    for i in order.tolist():
        if not kept or float((unit[kept] @ unit[i]).max()) < SAME:
            kept.append(i)
        if len(kept) == count:
            break
    return kept

