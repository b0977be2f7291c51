"""L-BFGS as ``torch.optim.LBFGS`` (no line search), its direction from the compact form in a few matrix products.

``torch.optim.LBFGS`` computes each direction by the two-loop recursion: four small tensor
operations per stored pair, 400 with the 100 pairs the attacks keep, per objective
evaluation. On a batch-1 LeNet attack that loop costs about as much as the evaluation
itself. The compact representation (Byrd, Nocedal and Schnabel, 1994) gives the same
``H g`` from ``S^T g``, ``Y^T g`` and two triangular solves of size ``m``, whatever ``m`` is.
The small matrices are kept in float64, so the direction is at least as accurate as the
float32 recursion. Steps, stopping rules and history updates are torch's.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


class LBFGS(torch.optim.Optimizer):
    """L-BFGS with torch's semantics (fixed step ``lr``, ``max_iter`` inner steps, torch's tolerances).

    Args:
        params: the leaves to optimise.
        lr: step length (the first step is scaled by ``min(1, 1 / |g|_1)`` as in torch).
        max_iter: inner iterations per ``step``.
        max_eval: objective evaluations per ``step`` (default ``1.25 * max_iter``).
        history_size: stored pairs ``(s, y)``.
        tolerance_grad: stop when the largest gradient entry is at most this.
        tolerance_change: stop when the step or the change of the objective is below this.

    Example:
        >>> x = torch.tensor([3.0, -2.0], requires_grad=True)
        >>> opt = LBFGS([x])
        >>> def closure():
        ...     opt.zero_grad()
        ...     loss = ((x - 1) ** 2).sum()
        ...     loss.backward()
        ...     return loss
        >>> _ = opt.step(closure)
        >>> [round(v, 4) for v in x.tolist()]
        [1.0, 1.0]
    """

    def __init__(self, params: Iterable[torch.Tensor], *, lr: float = 1.0, max_iter: int = 20,
                 max_eval: int | None = None, history_size: int = 100, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9) -> None:
        defaults = {"lr": lr, "max_iter": max_iter, "max_eval": max_eval if max_eval is not None else max_iter * 5 // 4,
                    "history_size": history_size, "tolerance_grad": tolerance_grad,
                    "tolerance_change": tolerance_change}
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS takes one parameter group")
        self._params: list[torch.Tensor] = self.param_groups[0]["params"]
        size = sum(p.numel() for p in self._params)
        device = self._params[0].device
        # the stored pairs live in a ring of ``history_size`` rows, never copied; ``_order`` lists them oldest first
        self._s = torch.zeros(history_size, size, dtype=torch.float64, device=device)
        self._y = torch.zeros(history_size, size, dtype=torch.float64, device=device)
        self._sy = torch.zeros(history_size, history_size, dtype=torch.float64, device=device)  # s_i . y_j by ring row
        self._yy = torch.zeros(history_size, history_size, dtype=torch.float64, device=device)  # y_i . y_j by ring row
        self._count = self._next = 0
        self._gamma = 1.0
        self._iterations = 0
        self._d = torch.zeros(size, device=device)
        self._t = 0.0
        self._previous_grad = torch.zeros(size, device=device)

    def _flat_grad(self) -> torch.Tensor:
        return torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), dtype=p.dtype, device=p.device)
                          for p in self._params])

    def _move(self, t: float, d: torch.Tensor) -> None:
        offset = 0
        for p in self._params:
            n = p.numel()
            p.add_(d[offset : offset + n].view_as(p), alpha=t)
            offset += n

    @property
    def _order(self) -> torch.Tensor:
        """Ring rows of the stored pairs, oldest first."""
        history = len(self._s)
        return (self._next - self._count + torch.arange(self._count, device=self._s.device)) % history

    def _remember(self, s: torch.Tensor, y: torch.Tensor) -> None:
        """Store ``(s, y)`` over the oldest pair once the ring is full, with its products with the others."""
        row = self._next
        self._s[row], self._y[row] = s.double(), y.double()
        self._count = min(self._count + 1, len(self._s))
        self._next = (row + 1) % len(self._s)
        self._sy[:, row] = self._s @ self._y[row]
        self._sy[row, :] = self._y @ self._s[row]
        self._yy[:, row] = self._yy[row, :] = self._y @ self._y[row]

    def _direction(self, g: torch.Tensor) -> torch.Tensor:
        """``-H g`` for the stored pairs with ``H_0 = gamma I`` (compact form, float64)."""
        g64, gamma = g.double(), self._gamma
        if self._count == 0:
            return (-gamma * g64).to(g.dtype)
        order = self._order
        sy = self._sy[order][:, order]
        r = torch.triu(sy)  # R_ij = s_i . y_j for i <= j, oldest first
        a, b = (self._s @ g64)[order], (self._y @ g64)[order]
        u = torch.linalg.solve_triangular(r, a[:, None], upper=True)[:, 0]
        inner = torch.diagonal(sy) * u + gamma * (self._yy[order][:, order] @ u) - gamma * b
        v = torch.linalg.solve_triangular(r.T, inner[:, None], upper=False)[:, 0]
        ring_v, ring_u = torch.zeros_like(self._s[:, 0]), torch.zeros_like(self._s[:, 0])
        ring_v[order], ring_u[order] = v, u
        hg = gamma * g64 + self._s.T @ ring_v - gamma * (self._y.T @ ring_u)
        return (-hg).to(g.dtype)

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor]) -> torch.Tensor:  # type: ignore[override]
        """Up to ``max_iter`` L-BFGS steps; ``closure`` re-evaluates the objective and sets the gradients."""
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        closure = torch.enable_grad()(closure)
        orig_loss = closure()
        loss, evals = float(orig_loss), 1
        g = self._flat_grad()
        if float(g.abs().max()) <= tol_grad:
            return orig_loss
        for n_iter in range(1, max_iter + 1):
            self._iterations += 1
            if self._iterations == 1:
                d = -g
            else:
                y, s = g - self._previous_grad, self._d * self._t
                ys = float(y.double() @ s.double())
                if ys > 1e-10:
                    self._remember(s, y)
                    self._gamma = ys / float(y.double() @ y.double())
                d = self._direction(g)
            self._previous_grad = g.clone()
            previous_loss = loss
            t = min(1.0, 1.0 / float(g.abs().sum())) * lr if self._iterations == 1 else lr
            if float(g @ d) > -tol_change:
                break
            self._move(t, d)
            self._d, self._t = d, t
            if n_iter != max_iter:
                loss, evals = float(closure()), evals + 1
                g = self._flat_grad()
            if n_iter == max_iter or evals >= max_eval or float(g.abs().max()) <= tol_grad:
                break
            if float((d * t).abs().max()) <= tol_change or abs(loss - previous_loss) < tol_change:
                break
        return orig_loss
