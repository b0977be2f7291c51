"""The attacks' L-BFGS: the compact-form direction equals the two-loop recursion; steps follow torch.optim.LBFGS."""
from __future__ import annotations

import pytest
import torch

from privbench.attacks.reconstruction.lbfgs import LBFGS


def _two_loop(pairs: list[tuple[torch.Tensor, torch.Tensor]], g: torch.Tensor, gamma: float) -> torch.Tensor:
    """-H g by Nocedal and Wright's Algorithm 7.4, float64, oldest pair first."""
    q, alphas = g.clone(), []
    for s, y in reversed(pairs):
        alpha = (s @ q) / (y @ s)
        q -= alpha * y
        alphas.append(alpha)
    r = gamma * q
    for (s, y), alpha in zip(pairs, reversed(alphas)):
        beta = (y @ r) / (y @ s)
        r += (alpha - beta) * s
    return -r


@pytest.mark.parametrize("stored", [1, 4, 9])  # 9 pairs into a ring of 6: the oldest three are dropped
def test_direction_equals_the_two_loop_recursion(stored):
    torch.manual_seed(stored)
    x = torch.zeros(12, requires_grad=True)
    opt = LBFGS([x], history_size=6)
    pairs = []
    for _ in range(stored):
        s = torch.randn(12, dtype=torch.float64)
        y = s + 0.3 * torch.randn(12, dtype=torch.float64)  # y . s > 0, as L-BFGS keeps only such pairs
        opt._remember(s, y)
        pairs = (pairs + [(s, y)])[-6:]
    opt._gamma = 0.7
    g = torch.randn(12)
    torch.testing.assert_close(opt._direction(g).double(), _two_loop(pairs, g.double(), 0.7), atol=1e-5, rtol=1e-5)


def test_steps_follow_torch_lbfgs():
    torch.manual_seed(0)
    a, b = torch.randn(40, 25), torch.randn(40)

    def run(cls: type) -> tuple[torch.Tensor, list[float]]:
        x = torch.zeros(25, requires_grad=True)
        opt, losses = cls([x], lr=1, max_iter=20, history_size=5), []

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = ((torch.tanh(a @ x) - 0.5 * b) ** 2).sum() + 0.01 * (x ** 4).sum()
            loss.backward()
            losses.append(float(loss))
            return loss

        for _ in range(4):
            opt.step(closure)
        return x.detach(), losses

    ours, our_losses = run(LBFGS)
    torch_x, torch_losses = run(torch.optim.LBFGS)
    assert our_losses[:25] == pytest.approx(torch_losses[:25], rel=1e-4)  # step for step while the ring fills
    assert len(our_losses) > 25 and len(torch_losses) > 25  # the ring wrapped
    torch.testing.assert_close(ours, torch_x, atol=1e-3, rtol=1e-3)  # the same minimum
    assert our_losses[-1] == pytest.approx(torch_losses[-1], rel=1e-5)
    assert our_losses[-1] < 0.5 * our_losses[0]
