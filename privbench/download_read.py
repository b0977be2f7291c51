"""What an active server reads from a download the client accepted: its victim's one-step gradient on a batch,
read by the server that crafted it and scored by the audit's rule (for the check's ROC, ``download_roc``)."""
from __future__ import annotations

import torch
from torch import nn

from privbench.attacks.active.base import ActiveAttack
from privbench.attacks.active.views import ActiveView
from privbench.figures import RECOVERED_FRACTION
from privbench.metrics.reconstruction import Recovered, score


def recovered(server: ActiveAttack, crafted: nn.Module, images: torch.Tensor, labels: torch.Tensor, *,
              mean: tuple[float, ...], std: tuple[float, ...], seed: int = 0) -> float:
    """The share of ``images`` (model input space, normalised by ``mean``/``std``) that ``server`` recovers at the
    audit's default rule (matched PSNR at least 20 dB) from the gradient of the mean cross-entropy on them, taken
    at ``crafted`` (the reply of one local step: any positive multiple reads the same); 0 when it reads nothing.

    Example:
        >>> from privbench.attacks.active.imprint import ImprintAttack
        >>> torch.manual_seed(0); net = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
        <torch._C.Generator object at ...>
        >>> server, public = ImprintAttack(bins=64, scale=1.0), torch.rand(200, 1, 4, 4)
        >>> crafted = server.craft(net, public, seed=0)
        >>> recovered(server, crafted, public[:2], torch.tensor([0, 1]), mean=(0.0,), std=(1.0,))
        1.0
    """
    crafted = crafted.train()
    crafted.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(crafted(images), labels).backward()
    grads = {name: p.grad.detach().clone() for name, p in crafted.named_parameters() if p.grad is not None}
    crafted.zero_grad(set_to_none=True)
    sent = {name: t.detach().clone() for name, t in crafted.state_dict().items()}
    view = ActiveView(sent=sent, observed=grads, reply_kind="gradient", training=None,
                      image_shape=tuple(images.shape[1:]), mean=mean, std=std,  # type: ignore[arg-type]
                      crafted_layer=server.crafted_layer(crafted))
    found = server.attack(view, seed=seed)
    if found.images is None or not len(found.images):
        return 0.0
    m = torch.tensor(mean).view(1, -1, 1, 1)
    s = torch.tensor(std).view(1, -1, 1, 1)
    pixels = (found.images.float() if found.pixels else found.images.float() * s + m).clamp(0, 1)
    truth = (images.float() * s + m).clamp(0, 1)
    scored = score(pixels, truth, recon_labels=torch.full((len(pixels),), -1), truth_labels=labels,
                   use_lpips=False, recovered=Recovered())
    return float(scored[RECOVERED_FRACTION.key])
