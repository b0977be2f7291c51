"""FedAvg-aware inversion (Dimitrov et al., "Data Leakage in Federated Averaging", TMLR 2022).

A client's update comes from several epochs of SGD whose batch order the server does not know. The attack
simulates the declared local training differentiably on candidate images and matches the update it would give
(``attacks.reconstruction.matching``, with the Fisher-elastic term of a GENE-FL record replayed on the candidates). As in the
paper, every epoch has its own copy of the client's images, so each epoch's batches may hold different images;
the copies are tied by an order-invariant prior (the paper's: the epochs' mean images agree; or ours, the default:
each epoch's copies matched to the first epoch's and pulled together image by image) and at the end each copy is
matched to the first epoch's images (Hungarian, within a label) and the matches averaged.
Labels come from the per-class counts the update gives away (``labels.bias.estimate_counts``, averaged along
the update's path as the paper does per step), laid out in the same random order in every epoch; without the
head's bias in the payload they are optimised jointly.

Ours, not the paper's: the matching term is Inverting Gradients' cosine over every carried parameter (the
paper's code weighs an L2 distance per layer), optimised with IG's signed Adam and step decay.
"""
from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from privbench.attacks.labels.views import LabelView
from privbench.attacks.reconstruction.base import Attempt, GradientInversion
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.attacks.reconstruction.ig import signed_adam_step
from privbench.attacks.reconstruction.matching import candidate_gradient
from privbench.attacks.reconstruction.objectives import cosine_distance, total_variation
from privbench.attacks.reconstruction.update_labels import (
    LABELS,
    counts_shown,
    counts_source,
    laid_out,
    update_counts,
)
from privbench.attacks.target import AttackTarget, Part
from privbench.attacks.views import ViewKind
from privbench.errors import AttackNotApplicableError
from privbench.payloads.kinds import Carries
from privbench.schema import Iterations, Number, PositiveInt, PublicImages, Rate, Restarts, Weight


def epochs_of(part: Part) -> int:
    """Local epochs a part's steps cover (the last one may be cut short)."""
    n = part.stop - part.start
    return math.ceil(part.steps / math.ceil(n / min(part.batch_size, n)))


def epoch_schedule(part: Part, offset: int) -> list[slice]:
    """The part's SGD steps as slices of a layout holding one copy of its images per epoch from ``offset``:
    step ``s`` of epoch ``e`` takes batch ``s`` of copy ``e``."""
    n = part.stop - part.start
    b = min(part.batch_size, n)
    per_epoch = math.ceil(n / b)
    out = []
    for s in range(part.steps):
        e, k = divmod(s, per_epoch)
        first = offset + e * n + k * b
        out.append(slice(first, offset + e * n + min((k + 1) * b, n)))
    return out


def epoch_prior(copies: torch.Tensor) -> torch.Tensor:
    """Mean over pairs of epochs of the mean squared difference of their mean images (``[E, N, C, H, W]``): zero
    whatever order each epoch holds its images in."""
    means = copies.mean(1).flatten(1)
    if len(means) < 2:
        return means.sum() * 0
    diff = means[:, None, :] - means[None, :, :]
    return (diff * diff).mean(-1).sum() / (len(means) * (len(means) - 1))


def match_copies(copies: torch.Tensor, labels: torch.Tensor) -> list[torch.Tensor]:
    """For each epoch, the order that lines its copies up with the first epoch's images (Hungarian on squared
    distance, within a label): ``copies[e][orders[e]]`` sits on ``copies[0]``."""
    with torch.no_grad():
        first = copies[0].flatten(1)
        same = (labels[:, None] == labels[None, :]).cpu().numpy()
        orders = [torch.arange(copies.shape[1], device=copies.device)]
        for e in range(1, len(copies)):
            cost = torch.cdist(copies[e].flatten(1), first).pow(2).cpu().numpy()
            cost = np.where(same, cost, cost.max() * 10 + 1e6)
            rows, cols = linear_sum_assignment(cost)
            order = torch.empty(len(cols), dtype=torch.long)
            order[torch.from_numpy(cols)] = torch.from_numpy(rows)
            orders.append(order.to(copies.device))
    return orders


def matched_prior(copies: torch.Tensor, orders: list[torch.Tensor]) -> torch.Tensor:
    """Mean squared distance of each epoch's matched copy of an image from the copies' mean (``orders`` from
    ``match_copies``): zero when every epoch holds the same images, in whatever order."""
    lined = torch.stack([c[o] for c, o in zip(copies, orders)])
    return ((lined - lined.mean(0, keepdim=True)) ** 2).mean() * len(copies)


def merge_copies(copies: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """One image per client image: each epoch's copies matched to the first epoch's (``match_copies``) and averaged
    (``[E, N, C, H, W]`` to ``[N, C, H, W]``)."""
    orders = match_copies(copies, labels)
    return torch.stack([c[o] for c, o in zip(copies, orders)]).mean(0)


#: The order-invariant priors that tie an image's copies across epochs.
TIES = ("mean", "matched")


class FedAvgInversion(GradientInversion):
    """Rebuild a client's images from its multi-epoch update by simulating its local training.

    Args:
        iterations: Adam steps per attempt.
        restarts: attempts; the lowest final objective wins.
        lr: Adam learning rate on the images.
        tv: weight of total variation.
        prior: weight of the epoch order-invariant prior.
        tie: the order-invariant prior: ``mean`` (the paper's: the epochs' mean images agree) or ``matched`` (ours:
            each epoch's copies, matched to the first epoch's every ``rematch`` steps, agree image by image).
        rematch: steps between re-matchings of the copies (``tie=matched``).
        points: models along the update at which the label counts' prior is estimated (1: the received model).
        public: labelled test-split images (no client holds them) for the label counts.
        max_images: most images rebuilt at once (per epoch).
        labels: ``counts`` (recovered from the update) or ``oracle`` (the batch's true counts, handed over by the
            evaluator: a control row that separates the label source from the epoch prior).
    """

    name = "fedavg_inversion"
    reads: ClassVar[frozenset[Carries]] = frozenset({"model"})
    view: ClassVar[ViewKind] = "labels"

    def __init__(self, *, iterations: Iterations = 1600, restarts: Restarts = 1, lr: Rate = 0.1, tv: Weight = 1e-3,
                 prior: float = 0.03, tie: str = "matched", rematch: Iterations = 25,
                 points: Annotated[int, Number(integer=True, low=1, high=10**4)] = 8, public: PublicImages = 2000,
                 max_images: PositiveInt = 128, labels: str = "counts") -> None:
        super().__init__(iterations=iterations, restarts=restarts, converged=0.0, stall_at=1.0, stall_tol=math.inf,
                         unroll=True, max_images=max_images)
        if lr <= 0 or tv < 0 or prior < 0 or points < 1 or public < 1:
            raise ValueError("attack.lr must be > 0, attack.tv and attack.prior >= 0, attack.points and "
                             "attack.public >= 1")
        if tie not in TIES or rematch < 1 or labels not in LABELS:
            raise ValueError(f"attack.tie must be one of {', '.join(TIES)}, attack.rematch >= 1 and attack.labels one "
                             f"of {', '.join(LABELS)}")
        self.lr, self.tv, self.prior, self.points, self.public = lr, tv, prior, points, public
        self.tie, self.rematch, self.labels = tie, rematch, labels
        self._counts: np.ndarray | None = None

    def attack(self, view: LabelView, *, seed: int) -> Reconstruction:  # type: ignore[override]
        target = view.target
        if target.unroll is None:
            raise AttackNotApplicableError(f"attack={self.name} replays a client's local training: "
                                           f"{target.knowledge.get('payload')} declares none")
        target.unroll = target.unroll.with_elastic(target.knowledge.get("training"))
        if target.unroll.elastic is not None:
            target.knowledge["replayed_regularisers"] = [
                *target.knowledge.get("replayed_regularisers", []),
                f"{target.unroll.elastic[0]:g} * sum_j 1[F_j >= {target.unroll.elastic[1]:g}] F_j (theta_j - Theta_j)^2, "
                "F the candidates' Fisher" + (" (by its proximal map)" if target.unroll.proximal_step else ""),
            ]
        self._counts = update_counts(view, labels=self.labels, points=self.points)
        found = super().attack(target, seed=seed)
        found.info["label_counts"] = counts_shown(self._counts)
        return found

    def label_source(self, target: AttackTarget) -> str:
        return counts_source(self._counts, self.labels)

    def attempt(self, target: AttackTarget, *, generator: torch.Generator) -> Attempt:
        assert target.unroll is not None
        parts = target.unroll.parts
        epochs = [epochs_of(p) for p in parts]
        sizes = [p.stop - p.start for p in parts]
        copies = [target.randn(e, n, *target.image_shape, generator=generator) for e, n in zip(epochs, sizes)]
        images = torch.cat([c.flatten(0, 1) for c in copies])
        target.clamp_(images)
        images.requires_grad_(True)
        schedule, offset = [], 0
        for part, e, n in zip(parts, epochs, sizes):
            schedule.append(epoch_schedule(part, offset))
            offset += e * n
        labels = logits = None
        base_labels = torch.zeros(0, dtype=torch.long)
        base_logits = torch.zeros(0)
        if self._counts is not None:  # the counts in one random order, the same in every epoch
            order = laid_out(self._counts, generator)
            labels = torch.from_numpy(np.tile(order, epochs[0])).to(target.device)
            base_labels = torch.from_numpy(order).to(target.device)
        else:  # one label per client image, shared by its copies
            base_logits = target.randn(sum(sizes), target.num_classes, generator=generator).requires_grad_(True)
        optimizer = torch.optim.Adam([images] + ([base_logits] if labels is None else []), lr=self.lr)
        milestones = [int(self.iterations * f) for f in (3 / 8, 5 / 8, 7 / 8)]
        scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=milestones, gamma=0.1)
        value = math.inf
        orders: list[list[torch.Tensor]] = []
        with self.progress(desc=self.name) as bar:
            for it in range(1, self.iterations + 1):
                optimizer.zero_grad()
                if labels is None:
                    logits = torch.cat([base_logits[sum(sizes[:k]):sum(sizes[:k + 1])].repeat(e, 1)
                                        for k, e in enumerate(epochs)])
                grads = candidate_gradient(target, images, labels=labels, label_logits=logits, schedule=schedule)
                loss = cosine_distance(grads, target.gradient) + self.tv * total_variation(images)
                if self.prior:
                    term, orders = self._tie(images, epochs, sizes, base_labels, it, orders)
                    loss = loss + self.prior * term
                signed_adam_step(loss, [images] + ([base_logits] if labels is None else []), optimizer, scheduler,
                                 target)
                value = float(loss.detach())
                bar.update(1, objective=value)
                if not math.isfinite(value) or not torch.isfinite(images).all():
                    return Attempt(images.detach()[: sizes[0]], torch.zeros(sizes[0], dtype=torch.long), math.nan,
                                   "nan", it)
        if labels is None:
            base_labels = base_logits.detach().argmax(1)
        merged, start = [], 0
        for c, k in zip(self._split(images.detach(), epochs, sizes), range(len(parts))):
            merged.append(merge_copies(c, base_labels[start:start + sizes[k]]))
            start += sizes[k]
        return Attempt(torch.cat(merged), base_labels.cpu(), value, "budget", self.iterations)

    def _tie(self, images: torch.Tensor, epochs: list[int], sizes: list[int], base_labels: torch.Tensor, it: int,
             orders: list[list[torch.Tensor]]) -> tuple[Any, list[list[torch.Tensor]]]:
        """The epoch prior tying each image's copies: to their mean (``tie=mean``), or to a matching of the copies
        made again every ``rematch`` steps; and the matching in use."""
        split = self._split(images, epochs, sizes)
        if self.tie == "mean":
            return sum(epoch_prior(c) for c in split), orders
        if (it - 1) % self.rematch == 0:
            orders = [match_copies(c, self._base(base_labels, sizes, k)) for k, c in enumerate(split)]
        return sum(matched_prior(c, o) for c, o in zip(split, orders)), orders

    @staticmethod
    def _base(labels: torch.Tensor, sizes: list[int], k: int) -> torch.Tensor:
        """Part ``k``'s labels (all zero where they are optimised: copies then match across every label)."""
        if len(labels) == 0:
            return torch.zeros(sizes[k], dtype=torch.long)
        return labels[sum(sizes[:k]):sum(sizes[:k + 1])]

    @staticmethod
    def _split(images: torch.Tensor, epochs: list[int], sizes: list[int]) -> list[torch.Tensor]:
        """Each part's copies as ``[E, N, C, H, W]``."""
        out, start = [], 0
        for e, n in zip(epochs, sizes):
            out.append(images[start:start + e * n].reshape(e, n, *images.shape[1:]))
            start += e * n
        return out

    def budget(self) -> dict[str, Any]:
        """The attack's budget and settings, for ``threat_model.json``."""
        return {**super().budget(), "optimiser": "signed Adam", "lr": self.lr, "tv": self.tv,
                "epoch_prior": self.prior, "tie": self.tie,
                "label_points": self.points, "labels": self.labels}
