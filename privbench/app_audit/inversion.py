"""Gradient inversion of an app's upload: the FedAvg-aware inversion (Dimitrov et al., TMLR 2022) replays the
client's declared local training on candidate images, with labels from the update's recovered counts, and is scored
as privbench scores its own runs (PSNR matched one-to-one, against chance drawn from the client's own evaluation
records). It runs where the client trained on at most ``--max-images`` records (the inversion rebuilds all of them).

The app's input scaling is read from its inputs: pixels are assumed in [0, 1] before an affine normalisation per
channel, whose range the records the loaders yielded span (their minimum and maximum map to 0 and 1).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from privbench.app_audit.attacks import ClientRound, stated_count
from privbench.app_audit.simulation import AppRun
from privbench.app_audit.training import Declared, ask, local_training
from privbench.errors import AttackNotApplicableError


def input_scale(run: AppRun) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The per-channel mean and std that map the app's inputs back to pixels in [0, 1] (module docstring)."""
    parts = [n[k] for n in run.notes for k in ("inputs", "held_inputs") if k in n and len(n[k]) and n[k].ndim == 4]
    if not parts:
        raise AttackNotApplicableError("the clients' loaders yielded no images [C, H, W]")
    x = torch.cat(parts).transpose(0, 1).reshape(parts[0].shape[1], -1)
    low, high = x.min(dim=1).values, x.max(dim=1).values
    if bool((high <= low).any()):
        raise AttackNotApplicableError("an input channel is constant: its pixel scale cannot be read")
    return tuple(float(v) for v in -low / (high - low)), tuple(float(v) for v in 1 / (high - low))


def reconstruct(model: Callable[[], nn.Module], cr: ClientRound, public: tuple[torch.Tensor, torch.Tensor],
                outside: tuple[torch.Tensor, torch.Tensor], scale: tuple[tuple[float, ...], tuple[float, ...]],
                flags: Declared, run_config: dict[str, Any], *, max_images: int, iterations: int, seed: int,
                out: Path) -> dict[str, Any]:
    """Invert one upload and score it against the records the client trained on that round."""
    from privbench.attacks.labels.views import LabelView
    from privbench.attacks.reconstruction.fedavg_inversion import FedAvgInversion
    from privbench.attacks.target import AttackTarget
    from privbench.audit.score import Scoring, Truth, score_finding
    from privbench.pixels import denormalise

    num, counted = stated_count(cr)
    if cr.capped or num > max_images:
        raise AttackNotApplicableError(f"{num} records, more than --max-images {max_images} (the inversion rebuilds "
                                       "every record of the update; raise it where there is time, e.g. a GPU)")
    training, sources = local_training(flags, cr.received.config, run_config, num)
    if training is None:
        raise AttackNotApplicableError(ask(sources))
    mean, std = scale
    upload, base = cr.payloads(training)
    net = model()
    c, h, w = (int(v) for v in public[0].shape[1:])
    with torch.no_grad():
        classes = int(net.eval()(public[0][:2]).shape[-1])
    net.train()  # the client's training is replayed as it ran (batch norm on batch statistics)
    target = AttackTarget.from_payload(upload, base=base, model=net, num_images=num, image_shape=(c, h, w),
                                       num_classes=classes, mean=mean, std=std, unroll=True)
    attack = FedAvgInversion(iterations=iterations, restarts=1, public=len(public[1]))
    view = LabelView(target, public[0], public[1])
    torch.manual_seed(seed)
    finding = attack.attack(view, seed=seed)
    if finding.images is None:
        raise AttackNotApplicableError("the inversion's attempt diverged (no finite objective); nothing to score")
    truth = Truth(images=denormalise(cr.members[0], mean, std).clamp(0, 1), labels=cr.members[1],
                  non_members=denormalise(outside[0], mean, std).clamp(0, 1), non_member_labels=outside[1],
                  class_frequencies=torch.bincount(public[1], minlength=classes).double() / len(public[1]),
                  mean=mean, std=std)
    scores = score_finding(finding, view, attack, truth, Scoring(seed=seed, match_on="mse", use_lpips=False, out=out))
    return {**{k: v for k, v in scores.items() if k != "attempts"}, "budget": {
        "attack": "fedavg_inversion", "iterations": iterations, "restarts": 1, "images": num, "count_from": counted},
        "input_scale": {"mean": list(mean), "std": list(std)}}
