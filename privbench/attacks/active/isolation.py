"""How an active server isolates one member inside a secure aggregate.

Secure aggregation shows the server only a cohort's sum, so a crafted download read through it mixes every
member's reply. Three published ways around it, all within what a server controls:

- **Model inconsistency** (Pasquini et al., CCS 2022): the victim gets the crafted download and every other member
  a *quiet* one, the same model with the crafted rows zeroed. A zero row's pre-activation is exactly 0 on every
  input, so its ReLU never fires, its gradient is 0 and it never moves (under plain SGD, momentum and weight decay;
  a DP-SGD trainer's noise moves it): in the sum those rows carry the victim's change alone, scaled by the
  victim's unknown share ``w`` of the cohort's weight. The server estimates ``w`` from the crafted rows the victim
  did not fire (their change is 0, so the sum holds ``w`` times what it sent: exact up to the secure sum's
  rounding) and drops the rows whose change is within that rounding (``within_noise``).
- **Sybils** (Boenisch et al., EuroS&P 2023): the server controls some cohort members; they upload what they
  received, so they add nothing to the sum's change and leave fewer honest members to hide the victim (all of the
  cohort but the victim isolate it; fewer leave the others' images in the sum, and the truth is still the
  victim's).

- **Per-client downloads** (LOKI, Zhao et al., S&P 2024; ``loki.py``): every member gets its own download, each
  with crafted rows only it fires, so the sum keeps every member apart and the server reads all of them.

An honest-but-curious client cannot see what the others received unless a defence (an agreed-model hash) says so.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

#: What each cohort member receives: the same crafted download, the crafted one for the victim only, or its own.
DOWNLOADS = ("same", "inconsistent", "per_client")


@dataclass(frozen=True)
class Isolation:
    """An active server's isolation of the victim in a secure aggregate.

    Attributes:
        downloads: ``same`` (every member gets the crafted download, as Fowl et al. send it), ``inconsistent``
            (only the victim; the others a quiet download) or ``per_client`` (each member its own, the attack's
            ``member_downloads``: the server reads every member).
        sybils: cohort members the server controls (they upload what they received).
    """

    downloads: str = "same"
    sybils: int = 0

    def __post_init__(self) -> None:
        if self.downloads not in DOWNLOADS:
            raise ValueError(f"attack.downloads must be one of {', '.join(DOWNLOADS)}, not {self.downloads!r}")
        if isinstance(self.sybils, bool) or not isinstance(self.sybils, int) or self.sybils < 0:
            raise ValueError(f"attack.sybils must be a whole number >= 0, not {self.sybils!r}")

    @property
    def isolates(self) -> bool:
        """Whether the server aims at one member of the cohort rather than the cohort."""
        return self.downloads == "inconsistent" or self.sybils > 0

    def describe(self) -> dict[str, Any]:
        """For ``threat_model.json``: what the server controls beyond the weights."""
        return {"per_client_downloads": self.downloads != "same", "sybil_clients": self.sybils}


def quiet(crafted: nn.Module, layer: str, rows: torch.Tensor) -> nn.Module:
    """A copy of ``crafted`` whose ``layer`` has ``rows`` (output units) zeroed, weights and bias: they never fire.

    Example:
        >>> net = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
        >>> q = quiet(net, "0", torch.tensor([1]))
        >>> bool(q[0].weight[1].abs().sum() == 0), bool(q[0].bias[1] == 0), bool(q[0].weight[0].abs().sum() > 0)
        (True, True, True)
    """
    out = copy.deepcopy(crafted)
    module = out.get_submodule(layer)
    with torch.no_grad():
        for name in ("weight", "bias"):
            tensor = getattr(module, name, None)
            if isinstance(tensor, torch.Tensor):
                tensor[rows] = 0
    return out


def within_noise(observed: dict[str, torch.Tensor], layer: str, rows: torch.Tensor, *, k: float = 6.0) -> int:
    """Zero, in ``observed`` (the server's view of the victim's change), the crafted ``rows`` of ``layer`` whose bias
    change is within ``k`` robust standard deviations (1.4826 x the median absolute deviation over the crafted rows,
    most of which the victim did not fire) of zero: the secure sum's rounding, not a read. Returns how many.

    Example:
        >>> view = {"l.weight": torch.ones(5, 2), "l.bias": torch.tensor([1e-6, -2e-6, 1e-6, 0.0, 0.5])}
        >>> within_noise(view, "l", torch.arange(5)), view["l.bias"].tolist()[-1], float(view["l.weight"][0].sum())
        (4, 0.5, 0.0)
    """
    bias = observed[f"{layer}.bias"][rows].double()
    spread = 1.4826 * float((bias - bias.median()).abs().median())
    quiet_rows = rows[bias.abs() <= k * spread]
    for name in (f"{layer}.weight", f"{layer}.bias"):
        if name in observed:
            observed[name] = observed[name].clone()
            observed[name][quiet_rows] = 0
    return len(quiet_rows)


def victim_share(mean: torch.Tensor, sent: torch.Tensor, rows: torch.Tensor) -> float:
    """The victim's share ``w`` of the cohort's weight, from the crafted ``rows`` of a layer's aggregate ``mean``
    (weights and bias side by side, ``[H, D + 1]``) and of what the victim was ``sent``. Each row's least-squares
    ratio ``<mean_r, sent_r> / |sent_r|^2`` is ``w`` exactly where the victim did not fire it and something else
    where it did, so ``w`` is the median of the three closest ratios: three unfired rows agree to the secure sum's
    rounding, whether they are most rows (sparse traps) or a few (an imprint's top bins), where fired rows vary.

    Example:
        >>> sent = torch.tensor([[1.0, 2.0], [3.0, 1.0], [2.0, 2.0]])
        >>> mean = 0.25 * sent
        >>> mean[0] += torch.tensor([0.5, -0.1])  # a fired row
        >>> victim_share(mean, sent, torch.arange(3))
        0.25
    """
    m, s = mean[rows].double().flatten(1), sent[rows].double().flatten(1)
    norms = (s * s).sum(1)
    ok = norms > 0
    if not bool(ok.any()):
        raise ValueError("victim_share: every crafted row the victim was sent is zero")
    ratios = ((m * s).sum(1)[ok] / norms[ok]).sort().values
    k = min(len(ratios), 3)
    widths = ratios[k - 1:] - ratios[: len(ratios) - k + 1]
    start = int(widths.argmin())
    return float(ratios[start: start + k].median())
