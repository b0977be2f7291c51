"""Label counts of one step's gradient from its classifier head's weight and bias gradients.

From one step's gradient the head's weight gradient says more (``estimator=head``, the default there):
``B dW = sum_i (p_i - y_i) h_i^T`` carries each batch's own predictions and head inputs ``h_i``, which the bias
alone averages away (iLRG, Ma et al. 2023, read counts off the head's weight and bias gradients of untrained
models). privbench reads them by shadow batches: the attacker, who holds the model and labelled public images,
forms ``shadows`` batches of the victim's size from them (class mixes drawn from a flat Dirichlet), computes each
one's head gradient in closed form from the public images' head inputs, and fits a ridge regression from the
gradient's features ``(db, dW W^T)`` to the batch's mean prediction ``pbar``; the victim's counts are then
``B (pbar - db)`` from the exact bias identity, and ``refits`` more regressions are fitted on shadow batches drawn
around the counts found (80 % their mix, 20 % a flat Dirichlet), where the map is nearly linear.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from privbench.attacks.labels.bias import largest_remainder
from privbench.attacks.target import AttackTarget
from privbench.errors import AttackNotApplicableError
from privbench.progress import phase


def head_inputs(model: nn.Module, head: str, images: torch.Tensor, *, batch: int = 500
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The inputs of the classifier head ``head`` (``[N, d]``) and the softmax predictions (``[N, C]``) on
    ``images``, in double precision."""
    module = dict(model.named_modules())[head]
    if not isinstance(module, nn.Linear):
        raise AttackNotApplicableError(f"attack.estimator=head reads a linear classifier head; {head} is a "
                                       f"{type(module).__name__}")
    captured: list[torch.Tensor] = []
    hook = module.register_forward_hook(lambda m, args, out: captured.append(args[0].detach().flatten(1)))
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            probabilities = torch.cat([F.softmax(model(images[i:i + batch]), 1) for i in range(0, len(images), batch)])
    finally:
        hook.remove()
        model.train(was)
    return torch.cat(captured).double().cpu(), probabilities.double().cpu()


def _head_features(weight_gradient: torch.Tensor, bias_gradient: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A head gradient's regression features: the bias gradient and ``dW W^T`` (each class's row against each head
    row: ``sum_i (p_ic - y_ic)(z_ik - b_k) / B``)."""
    return torch.cat([bias_gradient, (weight_gradient @ weight.T).flatten()])


def counts_from_head(target: AttackTarget, public: torch.Tensor, public_labels: torch.Tensor, *, shadows: int = 4000,
                     refits: int = 1, ridge: float = 1e-6, seed: int = 0) -> np.ndarray:
    """Per-class counts of the ``target.num_images`` images of one step's gradient from its head's weight and bias
    gradients, by shadow batches of public images (module docstring)."""
    head = target.head
    weight_gradient = target.gradient.get(f"{head}.weight")
    bias_gradient = target.gradient.get(f"{head}.bias")
    if weight_gradient is None or bias_gradient is None:
        raise AttackNotApplicableError(f"{target.knowledge.get('payload')}: the message does not carry the classifier "
                                       f"head's bias and weight ({head}.bias, {head}.weight), which "
                                       "attack.estimator=head reads the counts from")
    inputs, probabilities = head_inputs(target.model, head, public)
    weight = dict(target.model.named_parameters())[f"{head}.weight"].detach().double().cpu()
    observed = _head_features(weight_gradient.double().cpu(), bias_gradient.double().cpu(), weight)
    classes, batch = target.num_classes, target.num_images
    labels = public_labels.cpu().long()
    held = [c for c in range(classes) if bool((labels == c).any())]
    rows = {c: (labels == c).nonzero().flatten().numpy() for c in held}
    rng = np.random.default_rng(seed)

    def estimate(around: np.ndarray | None, bar: Any) -> np.ndarray:
        features, means = [], []
        for _ in range(shadows):
            mix = rng.dirichlet(np.ones(len(held)))
            if around is not None:
                mix = 0.8 * around + 0.2 * mix
            count = rng.multinomial(batch, mix)
            index = torch.from_numpy(np.concatenate([rng.choice(rows[c], k) for c, k in zip(held, count)]))
            error = probabilities[index] - F.one_hot(labels[index], classes).double()
            features.append(_head_features(error.T @ inputs[index] / batch, error.mean(0), weight))
            means.append(probabilities[index].mean(0))
            bar.update(1)
        x, y = torch.stack(features), torch.stack(means)
        centre, scale = x.mean(0), x.std(0).clamp_min(1e-12)
        design = torch.cat([(x - centre) / scale, torch.ones(len(x), 1, dtype=torch.float64)], 1)
        gram = design.T @ design + ridge * len(design) * torch.eye(design.shape[1], dtype=torch.float64)
        beta = torch.linalg.solve(gram, design.T @ y)
        pbar = torch.cat([(observed - centre) / scale, torch.ones(1, dtype=torch.float64)]) @ beta
        counts = largest_remainder((batch * (pbar - bias_gradient.double().cpu())).numpy(), batch)
        counts[[c for c in range(classes) if c not in held]] = 0  # no public image, no client of that class
        return largest_remainder(counts.astype(float), batch)

    with phase(f"label counts: {1 + refits} regressions on shadow batches", total=shadows * (1 + refits),
               unit="batch") as bar:
        counts = estimate(None, bar)
        for _ in range(refits):
            counts = estimate(np.array([counts[c] + 0.5 for c in held]) / (batch + 0.5 * len(held)), bar)
    return counts
