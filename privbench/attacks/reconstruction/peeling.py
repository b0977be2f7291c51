"""Pin, certify and peel: turning separated candidates into exact inputs, one batch of them at a time.

``G = A X`` (``[m, n]``, rank ``B``) and ``b = A 1`` (a first linear layer's weight and bias gradients, or a
cohort's one-step updates, which mix the same way). With ``G = A_r V`` (rank-``B`` SVD) each input is
``x_j = r_j V`` for the ``j``-th row of ``Q^-1`` and its output gradient ``a_j = A_r q_j`` for the ``j``-th
column of ``Q``, with ``r_j q_j = 1``:

- **pin**: an input of a task whose backgrounds are black has exact zeros (after the shift by ``low``) on every
  background pixel; a candidate near it is pinned to the row ``r`` that is zero on the candidate's near-black
  pixels (a least-absolute fit, robust to the few it mistakes).
- **certify**: a true input's own loss gradient at the layer, for its label, lies in the ``B``-dimensional column
  space of ``G`` (``a_j`` does, up to its client's positive weight); any other image's does not, once the layer
  has more units than the mixture has inputs (``m - B`` independent conditions).
- **peel**: a certified input's share ``A_r q_j r_j V`` is removed from ``G`` (and ``A_r q_j`` from ``b``), exactly,
  so what is left mixes ``B - 1`` inputs and separates better.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

#: A certified input's loss gradient lies this close (relative) to the mixture's column space.
SPAN = 1e-3
#: Fewest conditions the certificate must test (units beyond the mixture's rank).
SLACK = 8
#: A pinned input must lie in the pixel range within this share of the range (an input a little off the truth
#: that passed would leave its error in the mixture when peeled, and stall every later round).
RANGE = 1e-6


@dataclass(frozen=True)
class Mixture:
    """A first layer's weight gradient ``G`` (``[m, n]``) and bias gradient ``b`` (``[m]``) mixing ``rank``
    inputs, float64; ``low`` (``[n]``) is each input entry's value at a black pixel."""

    weight_grad: torch.Tensor
    bias_grad: torch.Tensor
    rank: int
    low: torch.Tensor

    @cached_property
    def svd(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(U_r, A_r, V)``: the orthonormal column basis, ``A_r = U_r S_r`` and the row basis, rank ``rank``."""
        u, s, vh = torch.linalg.svd(self.weight_grad, full_matrices=False)
        return u[:, :self.rank], u[:, :self.rank] * s[:self.rank], vh[:self.rank]

    @cached_property
    def beta(self) -> torch.Tensor:
        """The bias gradient's coordinates on ``A_r`` (``b = A_r beta``)."""
        return torch.linalg.lstsq(self.svd[1], self.bias_grad[:, None]).solution[:, 0]

    @cached_property
    def basis(self) -> torch.Tensor:
        """``V - low beta 1^T`` (``[rank, n]``): a row ``r`` with ``r beta = 1`` rebuilds ``r basis + low``."""
        return self.svd[2] - self.beta[:, None] * self.low[None, :]

    @property
    def certifiable(self) -> bool:
        """Whether the layer has enough units beyond the mixture's rank for the certificate to test anything."""
        return self.weight_grad.shape[0] - self.rank >= SLACK

    def pin(self, candidates: torch.Tensor, *, share: float, iterations: int) -> torch.Tensor:
        """Each candidate (``[k, n]``) pinned to the row that is exactly ``low`` on the pixels the candidate holds
        within ``share`` of its range of ``low``: iteratively reweighted least squares for the least-absolute fit
        (``r beta = 1``), so pixels wrongly taken for background do not move it."""
        basis, beta = self.basis, self.beta
        shifted = candidates.double() - self.low
        near = (shifted.abs() <= share * shifted.abs().amax(1, keepdim=True)).double()
        weights = near
        rows = torch.zeros(len(candidates), len(beta), dtype=torch.float64)
        ridge = 1e-12 * (basis * basis).sum() * torch.eye(len(beta), dtype=torch.float64)
        for step in range(iterations + 1):
            gram = torch.einsum("bp,kp,cp->kbc", basis, weights, basis) + ridge
            solved = torch.linalg.solve(gram, beta.expand(len(rows), -1).unsqueeze(-1)).squeeze(-1)
            rows = solved / (solved @ beta)[:, None]
            residual = (rows @ basis).abs()
            floor = 1e-9 * residual.amax(1, keepdim=True).clamp(min=1e-300)
            if step < iterations - 1:
                weights = near / torch.maximum(residual, floor)
            else:  # last: the plain least-squares fit on the pixels the fit holds at black (exact when they are)
                weights = near * (residual <= 1e3 * floor).double()
        return rows @ basis + self.low

    def vertices(self, count: int, *, generator: torch.Generator) -> torch.Tensor:
        """``count`` candidate inputs (``[count, n]``), each the row that is exactly ``low`` on ``rank - 1`` pixels
        drawn at random among those some input lights (an input is one wherever the draw falls in its background):
        cheap only while the rank is small, as the chance of such a draw falls geometrically with it."""
        basis, beta = self.basis, self.beta
        lit = torch.nonzero(basis.abs().amax(0) > 1e-9 * float(basis.abs().max()))[:, 0]
        if self.rank < 1 or len(lit) < self.rank - 1:
            return basis.new_zeros(0, basis.shape[1])
        picks = lit[torch.rand(count, len(lit), generator=generator).argsort(1)[:, :self.rank - 1]]
        system = torch.cat([basis.T[picks], beta.expand(count, 1, -1)], 1)  # [count, rank, rank]
        target = torch.zeros(count, self.rank, dtype=torch.float64)
        target[:, -1] = 1.0
        solvable = torch.linalg.matrix_rank(system) == self.rank
        rows = torch.linalg.solve(system[solvable], target[solvable].unsqueeze(-1)).squeeze(-1)
        return rows @ basis + self.low

    def residuals(self, gradients: torch.Tensor) -> torch.Tensor:
        """``[N, C]``: how far (relative) each loss gradient at the layer (``[m, N, C]``) lies from ``G``'s column
        space."""
        u = self.svd[0]
        inside = torch.einsum("mr,rnc->mnc", u, torch.einsum("mr,mnc->rnc", u, gradients))
        return (gradients - inside).norm(dim=0) / gradients.norm(dim=0).clamp(min=1e-300)

    def peel(self, inputs: torch.Tensor, out_grads: torch.Tensor) -> "Mixture":
        """The mixture without the certified ``inputs`` (``[k, n]``), given each one's loss gradient at the layer
        for its label (``[m, k]``, any positive scale)."""
        _, a_r, v = self.svd
        rows = torch.linalg.lstsq(self.basis.T, (inputs.double() - self.low).T).solution.T  # [k, rank]
        q = torch.linalg.lstsq(a_r, out_grads.double()).solution  # [rank, k], each column up to its scale
        q = q / torch.einsum("kr,rk->k", rows, q)[None, :]  # r_j q_j = 1
        shares = a_r @ q
        return Mixture(self.weight_grad - shares @ rows @ v, self.bias_grad - shares.sum(1), self.rank - len(inputs),
                       self.low)
