"""The server's completion of a partial upload: the layers a client did not send, fitted on public records.

A learnGene carries only some layers; the server forms a model from it by putting them in the model the client
started from, so the layers nobody sent score at their old values (``attack.complete=base``). A server that wants
the upload's membership signal through a working model can instead fit the unsent layers on records it holds
(``attack.complete=public``: the attacker's population records that no shadow trained on, test-split records no
client holds and no candidate is), the sent layers frozen. Shadow models are completed the same way, so LiRA and
RMIA compare like with like. RMIA's population records ``z`` may be among the fit's: every candidate is compared
with the same ``z``, so its ranking (the AUC) is unchanged, though ties grow.

Every model (the target and ``K`` shadows) is fitted at once as one stacked model: the loss is the sum of each
member's mean batch loss, and Adam acts elementwise, so each member follows the path it would alone.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from privbench.attacks.reconstruction.stacked import StackedModel
from privbench.attacks.views import at_weights
from privbench.errors import AttackNotApplicableError
from privbench.progress import phase

#: How the server forms a model from an upload that lacks layers.
COMPLETIONS = ("base", "public")


def fit_unsent(model: nn.Module, stacked: Mapping[str, torch.Tensor], sent: set[str], images: torch.Tensor,
               labels: torch.Tensor, *, steps: int, generator: torch.Generator, lr: float = 3e-3,
               batch_size: int = 32) -> dict[str, torch.Tensor]:
    """``stacked`` (every parameter ``[P, *shape]`` by name) with the parameters not in ``sent`` fitted by ``steps``
    Adam steps on batches of ``images`` (normalised) and ``labels``, the same batches for every member, drawn
    from ``generator``; the ``sent`` ones unchanged. Nothing to fit (every parameter sent) returns ``stacked``."""
    names = [n for n, _ in model.named_parameters()]
    free = [n for n in names if n not in sent]
    params = {n: stacked[n].detach().clone() for n in names}
    if not free:
        return params
    stack = StackedModel.from_stacked(model, params)
    leaves = stack.watch(free)
    optimiser = torch.optim.Adam(leaves, lr=lr)
    members = next(iter(params.values())).shape[0]
    was = stack.module.training
    stack.module.eval()
    with phase(f"unsent layers fitted on {len(labels)} public records ({members} models at once)", total=steps,
               unit="step") as bar:
        for _ in range(steps):
            rows = torch.randint(len(labels), (min(batch_size, len(labels)),), generator=generator).to(images.device)
            out = stack(images[rows].unsqueeze(0).expand(members, *images[rows].shape))
            y = labels[rows].unsqueeze(0).expand(members, -1)
            loss = F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="sum") / len(rows)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            bar.update(1)
    stack.module.train(was)
    return {n: (stack.params[n] if n in free else params[n]).detach() for n in names}


def public_accuracy(model: nn.Module, stacked: Mapping[str, torch.Tensor], images: torch.Tensor,
                    labels: torch.Tensor, *, batch_size: int = 256) -> torch.Tensor:
    """Each stacked member's accuracy on ``images`` (``[P]``): how well the completed models classify."""
    stack = StackedModel.from_stacked(model, {n: t.detach() for n, t in stacked.items()})
    stack.module.eval()
    right = torch.zeros(next(iter(stacked.values())).shape[0], device=images.device)
    with torch.no_grad():
        for first in range(0, len(labels), batch_size):
            x, y = images[first:first + batch_size], labels[first:first + batch_size]
            out = stack(x.unsqueeze(0).expand(len(right), *x.shape))
            right += (out.argmax(-1) == y.unsqueeze(0)).float().sum(1)
    return right / len(labels)


def completed(model: nn.Module, target: Mapping[str, torch.Tensor], shadows: Mapping[str, torch.Tensor],
              sent: set[str], images: torch.Tensor, labels: torch.Tensor, *, steps: int,
              generator: torch.Generator) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, float]]:
    """The target's parameters (by name) and the shadows' (``[K, *shape]``) with their unsent layers fitted on the
    public ``images`` and ``labels`` together (``fit_unsent``), and the completed models' accuracy on those records
    (the target's, the shadows' mean) for the record."""
    names = [n for n, _ in model.named_parameters()]
    stacked = {n: torch.cat([target[n].detach().to(shadows[n]).unsqueeze(0), shadows[n]]) for n in names}
    fitted = fit_unsent(model, stacked, sent, images, labels, steps=steps, generator=generator)
    accuracy = public_accuracy(model, fitted, images, labels)
    return ({n: t[0] for n, t in fitted.items()}, {n: t[1:] for n, t in fitted.items()},
            {"completed_target_public_accuracy": round(float(accuracy[0]), 4),
             "completed_shadows_public_accuracy": round(float(accuracy[1:].mean()), 4)})


def complete_upload(model: nn.Module, target: nn.Module, shadows: Mapping[str, torch.Tensor], sent: set[str],
                    images: torch.Tensor, labels: torch.Tensor, datasets: torch.Tensor, candidates: int, *,
                    steps: int, generator: torch.Generator) -> tuple[nn.Module, dict[str, torch.Tensor], dict[str, Any]]:
    """LiRA's target and shadows with the layers the upload lacks fitted (``completed``) on the population rows of
    ``images`` (those after the first ``candidates``) that no shadow's dataset (``datasets``, ``[K, N]``) holds;
    unchanged where the upload carries every layer. Refused in one line when no such record is left."""
    unsent = [n for n, _ in model.named_parameters() if n not in sent]
    if not unsent:
        return target, dict(shadows), {"completion": "nothing unsent: the upload carries every layer"}
    drawn = torch.zeros(len(labels), dtype=torch.bool, device=datasets.device)
    drawn[datasets.flatten()] = True
    free = (~drawn).nonzero().flatten()
    free = free[free >= candidates].to(images.device)
    if len(free) == 0:
        raise AttackNotApplicableError(
            f"attack.complete=public fits the {len(unsent)} unsent tensors on population records no shadow trained on, "
            f"and the shadows drew all {len(labels) - candidates} (offline shadows, or a pool under twice the "
            "victim's samples): use attack.complete=base")
    state, fitted, info = completed(model, dict(target.named_parameters()), shadows, sent, images[free],
                                    labels[free], steps=steps, generator=generator)
    return at_weights(target, state).eval(), fitted, {"completion": f"{len(unsent)} unsent tensors fitted on {len(free)} population "
                                                "records no shadow trained on", **info}
