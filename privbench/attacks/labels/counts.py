"""Label counts of a message, from its classifier head's bias gradient (an LLG-style estimate).

For softmax cross-entropy averaged over ``B`` images, the head bias's gradient is exactly
``db_c = pbar_c - n_c / B`` (``pbar``: the batch's mean prediction, ``n_c``: images of class ``c``), so
``n = B (pbar - db)``. The batch's predictions are unknown; they are estimated on labelled public data as the
mix of per-class mean predictions at the current counts, ``pbar = sum_k (n_k / B) E[p | k]``, iterated to a fixed
point from the unconditional mean (after Wainakh et al., "User-level label leakage from gradients in FL", 2022,
who estimate the impact on auxiliary data). Counts are clipped at 0 and rounded by largest remainder to sum to
``B``. For an upload the pseudo-gradient ``-delta / (lr * steps)`` averages the steps' bias gradients, so
``n = N (mean_t pbar_t - db)`` over the client's ``N`` samples (epochs of equal batches); the steps' predictions
``pbar_t`` are estimated at the models where the steps took their gradients, interpolated on the line from the
received model to the one the upload implies, ``theta_0 + (t/S)(theta_S - theta_0)`` for ``t = 0 .. S-1``
(Dimitrov et al., "Data Leakage in Federated Averaging", TMLR 2022, estimate a FedSGD label attack's parameters at
every FedAvg step this way), at most ``points`` of them evenly spaced.

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

from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from privbench.attacks.base import Attack
from privbench.attacks.labels.findings import InferredLabels
from privbench.attacks.labels.views import LabelView
from privbench.attacks.target import AttackTarget
from privbench.attacks.views import ViewKind
from privbench.errors import AttackNotApplicableError
from privbench.payloads import kind as payload_kind
from privbench.payloads.kinds import Carries
from privbench.progress import phase


def largest_remainder(share: np.ndarray, total: int) -> np.ndarray:
    """Non-negative integers summing to ``total`` closest to ``share`` (scaled to sum to ``total``).

    Example:
        >>> largest_remainder(np.array([1.6, 1.3, 0.1]), 3).tolist()
        [2, 1, 0]
    """
    share = np.clip(share, 0.0, None)
    share = share * total / share.sum() if share.sum() > 0 else np.full(len(share), total / len(share))
    counts = np.floor(share).astype(int)
    for c in np.argsort(-(share - counts), kind="stable")[: total - int(counts.sum())]:
        counts[c] += 1
    return counts


def counts_from_bias(bias_gradient: torch.Tensor, batch: int, conditional: torch.Tensor, *,
                     iterations: int = 10) -> np.ndarray:
    """Per-class counts of a batch of ``batch`` images from its head bias gradient and ``conditional[k]``, the mean
    prediction on public images of class ``k`` (``[C, C]``)."""
    db = bias_gradient.double().cpu()
    mix = conditional.double().cpu()
    pbar = mix.mean(0)
    counts = largest_remainder((batch * (pbar - db)).numpy(), batch)
    for _ in range(iterations):
        pbar = torch.from_numpy(counts / batch) @ mix
        again = largest_remainder((batch * (pbar - db)).numpy(), batch)
        if (again == counts).all():
            break
        counts = again
    return counts


def path_fractions(steps: int, points: int) -> list[float]:
    """Where on the line ``theta_0 -> theta_S`` the ``steps`` SGD steps took their gradients (``t/S``, ``t < S``),
    at most ``points`` of them evenly spaced (always including ``t = 0``).

    Example:
        >>> path_fractions(4, 8), path_fractions(5, 2)
        ([0.0, 0.25, 0.5, 0.75], [0.0, 0.8])
    """
    if steps <= points:
        return [t / steps for t in range(steps)]
    if points == 1:
        return [0.0]
    return [k / (points - 1) * (steps - 1) / steps for k in range(points)]


def update_path(target: AttackTarget, points: int) -> list[dict[str, torch.Tensor]]:
    """States where an update's steps took their gradients (``path_fractions``), interpolated between the received
    model and the end of the local training the payload implies (``theta_S = theta_0 - lr * steps * g`` on the names
    it carries; the rest stay at ``theta_0``). A gradient (one step), or ``points`` = 1, gives the received model
    alone."""
    start = {n: p.detach() for n, p in target.model.named_parameters()}
    training = target.knowledge.get("training") or {}
    steps = int(training.get("steps", 1))
    if points <= 1 or steps <= 1:
        return [start]
    scale = float(training["lr"]) * steps
    end = {n: start[n] - scale * target.gradient[n] if n in target.gradient else start[n] for n in start}
    return [{n: start[n] + f * (end[n] - start[n]) for n in start} for f in path_fractions(steps, points)]


def conditional_predictions(model: nn.Module, states: list[dict[str, torch.Tensor]], public: torch.Tensor,
                            public_labels: torch.Tensor, classes: int) -> torch.Tensor:
    """``E[p | k]``: the mean softmax prediction on public images of each class ``k`` (``[C, C]``), averaged over
    ``states`` (the models along an update's path); a class without public images gets the overall mean."""
    total = torch.zeros(classes, classes, dtype=torch.float64)
    was = model.training
    model.eval()
    with torch.no_grad():
        for state in states:
            probabilities = torch.cat([F.softmax(functional_call(model, state, (public[i:i + 500],)), 1)
                                       for i in range(0, len(public), 500)]).double().cpu()
            overall = probabilities.mean(0)
            labels = public_labels.cpu()
            total += torch.stack([probabilities[labels == k].mean(0) if bool((labels == k).any()) else overall
                                  for k in range(classes)])
    model.train(was)
    return total / len(states)


def estimate_counts(target: AttackTarget, public: torch.Tensor, public_labels: torch.Tensor, *, points: int = 1,
                    iterations: int = 10) -> np.ndarray:
    """Per-class counts of the ``target.num_images`` images a message was computed from, from its head bias and the
    public prior along ``points`` states of its update."""
    bias = target.gradient.get(f"{target.head}.bias")
    if bias is None:
        raise AttackNotApplicableError(f"{target.knowledge.get('payload')}: the message does not carry the "
                                       f"classifier head's bias ({target.head}.bias), which the counts are read from")
    conditional = conditional_predictions(target.model, update_path(target, points), public, public_labels,
                                          target.num_classes)
    return counts_from_bias(bias, target.num_images, conditional, iterations=iterations)


#: How counts are read: the head's bias (any message), its weight and bias by shadow batches (one step's
#: gradient), or ``auto`` (head for a gradient, bias for a model payload).
ESTIMATORS = ("auto", "bias", "head")


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


#: Where a gradient inversion's batch labels come from: ``auto`` (recovered counts for a batch of more than one
#: image when the view brings public data and the message carries the head's weight and bias; the head gradient's
#: sign rule otherwise), ``counts`` (always the recovered counts) or ``sign`` (iDLG's rule, repeated for a batch).
LABEL_RULES = ("auto", "counts", "sign")


def check_label_rule(labels: str, public: int) -> None:
    """Refuse an unknown ``attack.labels`` rule or no public images (an inversion's constructor, before compute)."""
    if labels not in LABEL_RULES or public < 1:
        raise ValueError(f"attack.labels must be one of {', '.join(LABEL_RULES)} and attack.public >= 1")


def with_counted_labels(view: AttackTarget | LabelView, rule: str, *, seed: int, points: int = 1) -> AttackTarget:
    """The view's gradient target with its candidates' labels taken from the recovered per-class counts where ``rule``
    asks for them (``LABEL_RULES``): ``head`` counts (shadow batches) from one step's gradient, ``bias`` counts along
    the update from a model payload; the target's ``knowledge`` says which. A plain target (no public data), the
    ``sign`` rule and, under ``auto``, an aggregate replayed member by member (the counts do not say which member
    holds which class) leave it as it is; ``counts`` without public data is refused."""
    if rule not in LABEL_RULES:
        raise ValueError(f"attack.labels={rule!r} is not one of {', '.join(LABEL_RULES)}")
    if not isinstance(view, LabelView):
        if rule == "counts" and view.labels is None:
            raise AttackNotApplicableError("attack.labels=counts needs labelled public data, which this view lacks")
        return view
    target = view.target
    head = target.head
    carried = f"{head}.weight" in target.gradient and f"{head}.bias" in target.gradient
    members = len(target.unroll.parts) if target.unroll is not None else 1  # an aggregate replayed member by member
    if rule == "sign" or (rule == "auto" and (target.num_images == 1 or not carried or members > 1)):
        return target
    images, labels = view.public, view.public_labels
    one_step = target.unroll is None and int((target.knowledge.get("training") or {}).get("steps", 1)) <= 1
    if one_step and carried:
        counts = counts_from_head(target, images, labels, seed=seed)
        how = "per-class counts recovered from the head's weight and bias gradients (shadow batches of public images)"
    else:
        counts = estimate_counts(target, images, labels, points=points)
        how = "per-class counts recovered from the head's bias gradient along the update"
    target.labels = torch.from_numpy(np.repeat(np.arange(len(counts)), counts)).long().to(target.device)
    target.knowledge["labels"] = how
    return target


def counted(target: AttackTarget) -> dict[int, int] | None:
    """The per-class counts a target's labels were set from (``with_counted_labels``), for a finding's info."""
    if target.labels is None:
        return None
    classes, numbers = target.labels.unique(return_counts=True)
    return {int(c): int(n) for c, n in zip(classes, numbers)}


class LabelCounts(Attack):
    """The classes a message was computed from and how many images of each, from the head's bias gradient.

    Args:
        iterations: fixed-point iterations of the class-conditional estimate of the batch's mean prediction.
        public: most public (test-split) images used for that estimate.
        points: models along a model payload's update at which that estimate is taken and averaged (1: the
            received model only; a gradient always uses the received model).
        estimator: ``auto`` (``head`` for one step's gradient, ``bias`` for a model payload), ``bias`` or ``head``
            (the head's weight and bias gradients by shadow batches; gradient payloads only).
        shadows: shadow batches of each ``head`` regression.
        refits: regressions refitted around the counts found.
    """

    name = "labels"
    reads: ClassVar[frozenset[Carries]] = frozenset({"gradient", "model"})
    view: ClassVar[ViewKind] = "labels"

    def __init__(self, *, iterations: int = 10, public: int = 2000, points: int = 1, estimator: str = "auto",
                 shadows: int = 4000, refits: int = 1) -> None:
        if iterations < 0 or public < 1 or points < 1 or shadows < 10 or refits < 0:
            raise ValueError("attack.iterations must be >= 0, attack.public >= 1, attack.points >= 1, "
                             "attack.shadows >= 10 and attack.refits >= 0")
        if estimator not in ESTIMATORS:
            raise ValueError(f"attack.estimator={estimator!r} is not one of {', '.join(ESTIMATORS)}")
        self.iterations, self.public, self.points = iterations, public, points
        self.estimator, self.shadows, self.refits = estimator, shadows, refits

    def cannot_read(self, kind: str) -> str | None:
        reason = super().cannot_read(kind)
        if reason is None and self.estimator == "head" and payload_kind(kind).carries != "gradient":
            return (f"attack.estimator=head reads one step's head gradient; {kind} is a multi-step model payload "
                    "(use attack.estimator=bias or auto)")
        return reason

    def budget(self) -> dict[str, Any]:
        out: dict[str, Any] = {"estimator": self.estimator, "public_images": self.public}
        if self.estimator != "bias":
            out.update({"shadow_batches": self.shadows, "refits": self.refits})
        return out

    def attack(self, view: LabelView, *, seed: int) -> InferredLabels:
        target = view.target
        one_step = int((target.knowledge.get("training") or {}).get("steps", 1)) <= 1
        use = self.estimator if self.estimator != "auto" else ("head" if one_step else "bias")
        if use == "head":
            counts = counts_from_head(target, view.public, view.public_labels, shadows=self.shadows,
                                      refits=self.refits, seed=seed)
        else:
            counts = estimate_counts(target, view.public, view.public_labels, points=self.points,
                                     iterations=self.iterations)
        return InferredLabels(counts={int(c): int(n) for c, n in enumerate(counts) if n > 0},
                              info={"estimator": use})
