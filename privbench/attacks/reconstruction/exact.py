"""Exact inversion of a fully connected layer's gradient (SPEAR, Dimitrov et al., NeurIPS 2024): the algebra.

A linear layer ``Z = X W^T + b`` followed by a ReLU has the weight gradient ``G = L^T X`` (``L = dLoss/dZ``,
``[B, m]``; ``X`` the batch's inputs, ``[B, n]``) and the bias gradient ``L^T 1``: ``G`` has rank ``B``, and each
column of ``L^T`` is zero on the units the ReLU switched off for that input. Write the rank-``B`` SVD
``G = A V`` (``A = U S``, ``[m, B]``); then ``L^T = A Q`` and ``X = Q^-1 V`` for one invertible ``Q``. A column
``q`` of ``Q`` is the 1-D null space of ``B - 1`` rows of ``A`` on which its input's ReLU was off; SPEAR samples
such row sets, keeps the ``q`` whose ``A q`` is sparse, fixes their scales with the bias gradient and solves for
``X``. A linear programme (``pattern_margin``) discards a ``q`` whose zero pattern no direction in ``G``'s row
space produces (a loose filter: the row space is not bounded to images); ``certify`` then requires each recovered
input to switch on the units its column of ``L`` marks and to give, alone, that column's values.
"""
from __future__ import annotations

import numpy as np
import torch

#: Entries of ``A q`` below this share of its largest entry count as zero (float32 gradients, SVD round-off).
ZERO = 1e-4


def factor(weight_grad: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(A, V, gap)``: the rank-``rank`` factors of ``weight_grad`` (``[m, n]``, float64) and the ratio of its
    next singular value to its ``rank``-th (near 0 when the gradient holds ``rank`` inputs; near 1 when more)."""
    u, s, vh = torch.linalg.svd(weight_grad.double(), full_matrices=False)
    if len(s) < rank or s[rank - 1] <= 1e-10 * s[0]:
        raise ValueError(f"the layer's gradient has rank below {rank}: fewer distinct inputs than declared, or none")
    gap = s[rank] / s[rank - 1] if len(s) > rank else torch.tensor(0.0, dtype=torch.float64)
    return u[:, :rank] * s[:rank], vh[:rank], gap


def zeros(a: torch.Tensor, q: torch.Tensor, *, zero: float = ZERO) -> torch.Tensor:
    """Which entries of ``a @ q`` (``q``: ``[B]`` or ``[k, B]``, one direction per row) are zero, relative to the
    largest entry of each."""
    values = (q @ a.T).abs()
    return values <= zero * values.amax(-1, keepdim=True).clamp(min=1e-300)


def sample_directions(a: torch.Tensor, count: int, *, weights: torch.Tensor | None,
                      generator: torch.Generator) -> torch.Tensor:
    """``count`` candidate directions ``[count, B]``: each spans the null space of ``B - 1`` rows of ``a`` drawn
    without replacement (uniformly, or with probability proportional to ``weights``), unit norm."""
    rows, rank = a.shape
    if weights is None:
        picks = torch.rand(count, rows, generator=generator, dtype=torch.float64).argsort(1)[:, :rank - 1]
    else:
        picks = torch.multinomial(weights.double().expand(count, rows).contiguous(), rank - 1, replacement=False,
                                  generator=generator)
    _, _, vh = torch.linalg.svd(a[picks])
    return vh[:, -1, :]


def refine(a: torch.Tensor, q: torch.Tensor, *, zero: float = ZERO) -> torch.Tensor:
    """``q`` refitted to every row of ``a`` it zeroes (the null direction of all of them, not of the ``B - 1``
    drawn): the zeros of a true direction then sit at round-off, however ill-conditioned the drawn rows were."""
    _, _, vh = torch.linalg.svd(a[zeros(a, q, zero=zero)])
    return vh[-1] * torch.sign(vh[-1] @ q)


def pattern_margin(off: np.ndarray, weight: np.ndarray, bias: np.ndarray, basis: np.ndarray) -> float:
    """The largest ``t <= 1`` such that some input ``x = c @ basis`` has ``w_i . x + b_i <= -t`` on the units
    ``off`` marks and ``>= t`` on the others (``weight``: ``[m, n]``; ``basis``: ``[B, n]``); positive when the
    pattern is one a single input in the row space produces, else negative (or -inf: the programme failed)."""
    from scipy.optimize import linprog

    signs = np.where(off, -1.0, 1.0)
    m = weight @ basis.T  # [units, B]
    scale = max(float(np.abs(m).max()), 1e-300)
    rows = np.c_[-(signs[:, None] * m) / scale, np.ones(len(signs))]
    bound = 1e3 * float(np.abs(bias).max() + 1.0)
    result = linprog(np.r_[np.zeros(basis.shape[0]), -1.0], A_ub=rows, b_ub=signs * bias / scale,
                     bounds=[(-bound, bound)] * basis.shape[0] + [(None, 1.0)], method="highs")
    return float(-result.fun) if result.status == 0 else float("-inf")


def solve_inputs(a: torch.Tensor, directions: torch.Tensor, v: torch.Tensor,
                 bias_grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(X, L)``: the inputs ``[B, n]`` and the layer's output gradients ``[m, B]`` from the ``B`` directions
    (``[B, B]``, one per row), their scales fixed so that ``L 1`` equals the bias gradient (least squares)."""
    q = directions.T
    scales = torch.linalg.lstsq(a @ q, bias_grad.double()[:, None]).solution[:, 0]
    q = q * scales
    return torch.linalg.solve(q, v), a @ q


def certify(inputs: torch.Tensor, out_grad: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
            live: torch.Tensor, backprop: torch.Tensor, *, zero: float = ZERO, agree: float = 1e-3) -> torch.Tensor:
    """One flag per recovered input ``[B]``: True when (1) on every unit of ``live`` (units some input switched on)
    where its column of ``out_grad`` (``[m, B]``, from the factorisation) is non-zero, the input switches the unit
    on, and (2) that column equals, up to a positive scale and ``agree`` relative error, ``backprop``'s (``[m, B]``:
    the loss gradient at the layer's output that the model computes for the input alone). A true input of a
    one-step gradient passes both; an input mixed from others fails (2) even where the patterns agree.

    Example:
        >>> w, b = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.zeros(2)
        >>> x = torch.tensor([[1.0, -1.0], [-1.0, 2.0]])
        >>> l = torch.tensor([[0.5, 0.0], [0.0, -0.3]])  # unit 0 on for input 0 only, unit 1 for input 1
        >>> certify(x, l, w, b, torch.tensor([True, True]), 2 * l).tolist()
        [True, True]
        >>> certify(x.flip(0), l, w, b, torch.tensor([True, True]), 2 * l).tolist()
        [False, False]
        >>> certify(x, l, w, b, torch.tensor([True, True]), -l).tolist()  # a negative scale is no match
        [False, False]
    """
    out_grad = out_grad.double()
    on = (inputs.double() @ weight.double().T + bias.double()).T > 0  # [m, B]
    nonzero = out_grad.abs() > zero * out_grad.abs().amax(0, keepdim=True)
    pattern = (on | ~nonzero | ~live[:, None]).all(0)  # an off unit passes no gradient back
    return pattern & (value_error(out_grad, backprop) <= agree)


def value_error(out_grad: torch.Tensor, backprop: torch.Tensor) -> torch.Tensor:
    """Per column (``[m, B]`` each; ``backprop`` may carry more trailing dimensions, one error each): the relative
    error of ``out_grad`` against its best positive multiple of ``backprop``; infinite where no positive multiple
    fits."""
    out_grad, backprop = out_grad.double(), backprop.double()
    if backprop.dim() > out_grad.dim():
        out_grad = out_grad.reshape(*out_grad.shape, *([1] * (backprop.dim() - out_grad.dim())))
    scale = (out_grad * backprop).sum(0) / (backprop * backprop).sum(0).clamp(min=1e-300)
    error = (out_grad - scale * backprop).norm(dim=0) / out_grad.norm(dim=0).clamp(min=1e-300)
    return torch.where(scale > 0, error, torch.full_like(error, float("inf")))


def ranked(pool: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    """The directions, those no other direction dominates first, each group by most zeros. ``d`` dominates ``c`` when
    it zeroes more units and all but at most one of ``c``'s: a direction mixed from two inputs whose ReLU patterns
    nearly agree zeroes their common off units (and one more), so one of the two true directions dominates it.

    Example:
        >>> z = lambda *bits: torch.tensor(bits, dtype=torch.bool)
        >>> pool = [(torch.tensor([1.0]), z(1, 1, 0, 0, 0)), (torch.tensor([2.0]), z(1, 1, 1, 1, 0)),
        ...         (torch.tensor([3.0]), z(0, 1, 1, 0, 1))]
        >>> [float(d) for d in ranked(pool)]
        [2.0, 3.0, 1.0]
    """
    offs = torch.stack([off for _, off in pool])
    counts = offs.sum(1)
    outside = (offs[:, None, :] & ~offs[None, :, :]).sum(2)  # [c, d]: units c zeroes and d does not
    dominated = ((counts[None, :] > counts[:, None]) & (outside <= 1)).any(1)
    order = sorted(range(len(pool)), key=lambda i: (bool(dominated[i]), -int(counts[i])))
    return [pool[i][0] for i in order]
