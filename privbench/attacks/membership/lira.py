"""The likelihood-ratio membership attack (LiRA, Carlini et al., "Membership Inference Attacks From First
Principles", IEEE S&P 2022) on one client's model upload.

The server knows the weights the victim started from and its declared local training (epochs, batch, lr,
momentum, samples, GENE-FL's penalty). It trains ``shadows`` client-rounds of its own from those weights
(``privbench.attacks.membership.shadows``, all at once) and, for every candidate record, fits a Gaussian to the record's
logit-scaled confidence ``phi = log p_y / (1 - p_y)`` under the shadows:

- ``online``: shadows in complementary pairs, each of a pair training on one random half of the candidates
  (filled up to the victim's sample count from the population), so every candidate is in half of the
  shadows; the score is ``log N(phi; mu_in, s_in^2) - log N(phi; mu_out, s_out^2)``.
- ``offline``: every shadow trains on population records only; the score is the one-sided
  ``(phi - mu_out) / s_out``.

Population records are test-split records of the candidates' classes that are not candidates, drawn with the
candidates' class proportions. With few shadows, ``fixed_variance`` uses one variance for all records (the
paper's recommendation below 64 shadows). A learnGene upload is scored as the model the server can form: the
base with the uploaded layers in place, for the target and for each shadow alike (``attack.complete=base``), or
with the layers nobody sent fitted on the population (``attack.complete=public``, ``completion.py``). The paper
queries augmented copies of each record; this version queries the record alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from privbench.attacks.base import Attack
from privbench.attacks.membership.completion import COMPLETIONS, complete_upload
from privbench.attacks.membership.findings import MembershipScores
from privbench.attacks.membership.shadows import ShadowTraining, train_shadows
from privbench.attacks.membership.views import MembershipView
from privbench.attacks.reconstruction.stacked import StackedModel, unstackable
from privbench.attacks.views import ViewKind, at_weights
from privbench.errors import AttackNotApplicableError
from privbench.payloads import kind as payload_kind
from privbench.payloads.kinds import Carries
from privbench.progress import phase
from privbench.schema import Candidates, Iterations, ScoringBatch, Shadows, Switch

Variant = Literal["online", "offline"]
VARIANTS: tuple[Variant, ...] = ("online", "offline")
#: Smallest variance a fitted Gaussian may have (a record every shadow scores alike).
MIN_VARIANCE = 1e-8


def logit_confidence(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log p_y - log(1 - p_y)`` of softmax ``logits`` (``[..., classes]``) at ``labels``, computed stably as
    ``z_y - logsumexp_{j != y} z_j``.

    Example:
        >>> z = torch.tensor([[2.0, 0.0, 0.0]])
        >>> p = torch.softmax(z, -1)[0, 0]
        >>> bool(torch.isclose(logit_confidence(z, torch.tensor([0]))[0], torch.log(p / (1 - p))))
        True
    """
    true = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    others = logits.scatter(-1, labels.unsqueeze(-1), float("-inf"))
    return true - torch.logsumexp(others, dim=-1)


def likelihood_ratio(phi: torch.Tensor, shadow_phi: torch.Tensor, inside: torch.Tensor, *,
                     fixed_variance: bool) -> torch.Tensor:
    """Online LiRA's score per record: ``log N(phi; mu_in, s_in^2) - log N(phi; mu_out, s_out^2)`` from the shadows'
    ``shadow_phi`` ``[K, M]``, ``inside[k, i]`` when shadow ``k`` trained on record ``i``."""
    mu_in, var_in = _gaussian(shadow_phi, inside, fixed_variance)
    mu_out, var_out = _gaussian(shadow_phi, ~inside, fixed_variance)
    return (-(phi - mu_in) ** 2 / (2 * var_in) - 0.5 * var_in.log()) - (-(phi - mu_out) ** 2 / (2 * var_out)
                                                                         - 0.5 * var_out.log())


def offline_score(phi: torch.Tensor, shadow_phi: torch.Tensor, *, fixed_variance: bool) -> torch.Tensor:
    """Offline LiRA's score per record: ``(phi - mu_out) / s_out`` (a monotone form of its one-sided test)."""
    mu, var = _gaussian(shadow_phi, torch.ones_like(shadow_phi, dtype=torch.bool), fixed_variance)
    return (phi - mu) / var.sqrt()


def _gaussian(values: torch.Tensor, mask: torch.Tensor, fixed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per record (column), the mean and unbiased variance of ``values`` where ``mask``; with ``fixed`` (or fewer
    than two values) the variance pooled over all records."""
    w = mask.to(values.dtype)
    n = w.sum(0)
    if (n < 1).any():
        raise AttackNotApplicableError("a candidate has no shadow on its side of the test; train more shadows")
    mu = (values * w).sum(0) / n
    squares = ((values - mu) ** 2 * w).sum(0)
    pooled = squares.sum() / (n - 1).clamp_min(0).sum().clamp_min(1)
    var = pooled.expand_as(mu) if fixed else torch.where(n >= 2, squares / (n - 1).clamp_min(1), pooled)
    return mu, var.clamp_min(MIN_VARIANCE)


class LiRA(Attack[MembershipView, MembershipScores]):
    """Score every candidate of a ``MembershipView`` by its likelihood ratio under shadow client-rounds.

    Args:
        variant: ``online`` (shadows with and without each candidate) or ``offline`` (shadows without).
        shadows: shadow client-rounds (online: rounded up to an even number, complementary pairs).
        fixed_variance: one variance for all records instead of one per record.
        max_candidates: most candidate records (members and as many class-matched non-members).
        batch_size: candidates scored at once.
        complete: how the server forms a model from an upload that lacks layers: ``base`` (the layers as the client
            started from) or ``public`` (fitted on the population, ``completion.py``); shadows alike.
        complete_steps: Adam steps of that fit.
    """

    name = "lira"
    reads: ClassVar[frozenset[Carries]] = frozenset({"model"})
    view: ClassVar[ViewKind] = "membership"

    def __init__(self, *, variant: Variant = "online", shadows: Shadows = 64, fixed_variance: Switch = False,
                 max_candidates: Candidates = 1000, batch_size: ScoringBatch = 256, complete: str = "base",
                 complete_steps: Iterations = 100) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"attack.variant={variant!r}: allowed {', '.join(VARIANTS)}")
        if complete not in COMPLETIONS:
            raise ValueError(f"attack.complete={complete!r}: allowed {', '.join(COMPLETIONS)}")
        if shadows < 2 or max_candidates < 2 or batch_size < 1:
            raise ValueError("attack.shadows and attack.max_candidates must be >= 2 and attack.batch_size >= 1")
        self.variant, self.fixed_variance = variant, fixed_variance
        self.shadows = shadows + shadows % 2 if variant == "online" else shadows
        self.max_candidates, self.batch_size = max_candidates, batch_size
        self.complete, self.complete_steps = complete, complete_steps

    def cannot_read(self, kind: str) -> str | None:
        reason = super().cannot_read(kind)
        if reason is None and payload_kind(kind).aggregate:
            return (f"attack=lira reads one client's upload; a {kind} averages several clients' (shadow cohorts are "
                    "not built): use attack=membership")
        return reason

    def cannot_face(self, *, clip: float | None) -> str | None:
        if clip is not None:
            return ("its shadows do not repeat DP-SGD's sampling and noise, so their scores would not be calibrated "
                    "to the upload; use attack=membership")
        return None

    def check_model(self, model: torch.nn.Module, image_shape: tuple[int, ...]) -> None:
        why = unstackable(model)
        if why is not None:
            raise AttackNotApplicableError(f"attack=lira trains its shadows as one stacked model, and {why}")

    def budget(self) -> dict[str, Any]:
        return {"shadows": self.shadows, "variant": self.variant,
                "variance": "pooled over records" if self.fixed_variance else "per record",
                "shadow_training": "the victim's declared local training, from the weights it started from",
                "queries": "the record alone (no augmentations)",
                "unsent_layers": (f"where the upload lacks layers, fitted on population records no shadow trained on, "
                                  f"{self.complete_steps} Adam steps, target and shadows alike"
                                  if self.complete == "public" else "as the client started from")}

    def attack(self, view: MembershipView, *, seed: int) -> MembershipScores:
        """One score per candidate, in the pool's order; shadows' data and batch orders drawn from ``seed``."""
        scored = self.confidences(view, seed=seed)
        m = len(view.candidates)
        target_phi, all_phi, inside = scored.target[:m], scored.shadows[:, :m], scored.inside
        if self.variant == "online":
            scores = likelihood_ratio(target_phi, all_phi, inside, fixed_variance=self.fixed_variance)
        else:
            scores = offline_score(target_phi, all_phi, fixed_variance=self.fixed_variance)
        return MembershipScores(scores=scores.cpu(), candidates=list(range(len(scores))),
                                info={"test": f"lira_{self.variant}", **scored.info})

    def confidences(self, view: MembershipView, *, seed: int, population: int = 0) -> "Confidences":
        """Train the shadows and score the candidates, then the first ``population`` population records, under the
        target and every shadow (``phi``, logit-scaled confidence)."""
        if view.base is None or view.training is None:
            raise AttackNotApplicableError(f"attack={self.name} needs the weights {view.knowledge.get('payload')} "
                                           "started from and its declared training")
        plan = ShadowTraining.of(view.training)
        samples = int(view.training.num_samples)
        if plan.steps(samples) != view.training.steps:
            raise AttackNotApplicableError(
                f"the record declares {view.training.steps} steps, but {plan.epochs} epochs of batch "
                f"{plan.batch_size} over {samples} samples are {plan.steps(samples)}: shadows cannot repeat it")
        pool = view.population if view.population is not None else view.candidates[:0]
        pool_labels = view.population_labels if view.population_labels is not None else view.labels[:0]
        generator = torch.Generator().manual_seed(seed * 7919 + 53)
        datasets, inside = shadow_datasets(view.labels.cpu(), pool_labels.cpu(), samples, self.shadows,
                                           online=self.variant == "online", generator=generator)
        device = view.candidates.device
        images = torch.cat([view.candidates, pool])
        labels = torch.cat([view.labels, pool_labels]).long()
        trained = train_shadows(view.model, view.base, plan, images, labels, datasets.to(device), generator)
        visible = set(view.weights)  # what the server forms from an upload: the base with its layers in place
        released = {n: t if n in visible else view.base[n].to(t).unsqueeze(0).expand_as(t)
                    for n, t in trained.items()}
        target = at_weights(view.model, view.weights).eval()
        completion: dict[str, Any] = {}
        if self.complete == "public":
            target, released, completion = complete_upload(view.model, target, released, visible, images, labels,
                                                           datasets.to(device), len(view.candidates),
                                                           steps=self.complete_steps, generator=generator)
        stack = StackedModel.from_stacked(view.model, released)
        stack.module.eval()
        queried = len(view.candidates) + min(population, len(pool))
        phi, shadow_phi = [], []
        batches = math.ceil(queried / self.batch_size)
        what = "candidates" if queried == len(view.candidates) else "candidates and population records"
        with torch.no_grad(), phase(f"{self.name}: {what} under {self.shadows} shadows", total=batches,
                                    unit="batch") as bar:
            for first in range(0, queried, self.batch_size):
                x = images[first:min(first + self.batch_size, queried)]
                y = labels[first:first + len(x)]
                phi.append(logit_confidence(target(x), y).double())
                out = stack(x.unsqueeze(0).expand(self.shadows, *x.shape))
                shadow_phi.append(logit_confidence(out, y.unsqueeze(0).expand(self.shadows, -1)).double())
                bar.update(1)
        info = {"candidates": len(view.candidates), "shadows": self.shadows, "shadow_samples": samples,
                "shadow_steps": plan.steps(samples), "population": int(len(pool)), **completion}
        return Confidences(torch.cat(phi), torch.cat(shadow_phi, dim=1), inside.to(device), info)


@dataclass(frozen=True)
class Confidences:
    """Records' logit-scaled confidences under the target (``[N]``) and the shadows (``[K, N]``): the candidates,
    then any population records queried; ``inside[k, i]``: shadow ``k`` trained on candidate ``i``."""

    target: torch.Tensor
    shadows: torch.Tensor
    inside: torch.Tensor
    info: dict[str, Any]


def shadow_datasets(labels: torch.Tensor, population_labels: torch.Tensor, samples: int, shadows: int, *,
                    online: bool, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Each shadow's training rows (``[K, samples]``, into candidates then population) and which candidates it holds
    (``[K, M]``).

    Online: shadows ``2j`` and ``2j + 1`` take complementary random halves of the candidates; offline: none. A pool
    of more than ``2 * samples`` candidates does not fit in two shadows: then shadow ``k`` takes the ``k``-th run of
    ``samples`` candidates along one random cycle of them, so each is in ``K * samples / M`` shadows (rounded down or
    up), never drawn unevenly. The rest of each shadow's ``samples`` are population records drawn without
    replacement, per class in the candidates' proportions (largest remainder). Refused in one line when the
    population is too small.
    """
    m = len(labels)
    classes, counts = labels.unique(return_counts=True)
    inside = torch.zeros(shadows, m, dtype=torch.bool)
    cycle = torch.randperm(m, generator=generator) if online and m > 2 * samples else None
    rows = []
    for k in range(shadows):
        if cycle is not None:
            half = cycle[(torch.arange(samples) + k * samples) % m]
            inside[k, half] = True
        elif online:
            if k % 2 == 0:
                order = torch.randperm(m, generator=generator)
            half = order[: m // 2] if k % 2 == 0 else order[m // 2:]
            half = half[:samples]
            inside[k, half] = True
        else:
            half = torch.zeros(0, dtype=torch.long)
        fill = samples - len(half)
        rows.append(torch.cat([half, m + _stratified(population_labels, classes, counts, fill, generator)]))
    return torch.stack(rows), inside


def largest_remainder(counts: torch.Tensor, total: int) -> torch.Tensor:
    """``total`` split over ``counts``' entries in their proportions, rounded by largest remainder.

    Example:
        >>> largest_remainder(torch.tensor([3, 1]), 6).tolist()
        [5, 1]
    """
    exact = counts.double() * total / counts.sum()
    take = exact.floor().long()
    rest = total - int(take.sum())
    if rest:
        take[torch.argsort(exact - take, descending=True, stable=True)[:rest]] += 1
    return take


def _stratified(population: torch.Tensor, classes: torch.Tensor, counts: torch.Tensor, total: int,
                generator: torch.Generator) -> torch.Tensor:
    """``total`` population rows, per class ``c`` about ``total * counts_c / sum(counts)`` (largest remainder)."""
    if total <= 0:
        return torch.zeros(0, dtype=torch.long)
    out = []
    for c, n in zip(classes.tolist(), largest_remainder(counts, total).tolist()):
        pool = population.eq(c).nonzero().flatten()
        if len(pool) < n:
            raise AttackNotApplicableError(
                f"attack=lira: a shadow needs {n} population records of class {c} and there are {len(pool)} "
                "(test-split records of the candidates' classes that are not candidates); lower "
                "victim.data_size or attack.max_candidates, or use attack.variant=online")
        out.append(pool[torch.randperm(len(pool), generator=generator)[:n]])
    return torch.cat(out)
