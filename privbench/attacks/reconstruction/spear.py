"""SPEAR (Dimitrov et al., NeurIPS 2024): exact batch recovery from the first fully connected layer's gradient, with
a certificate per image (``exact.py`` holds the algebra)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import torch
from torch import nn

from privbench.attacks.base import Attack
from privbench.attacks.labels.views import LabelView
from privbench.attacks.reconstruction import exact
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.attacks.reconstruction.first_layer import first_linear, layer_gradients, sees_input
from privbench.attacks.target import AttackTarget
from privbench.attacks.views import ViewKind
from privbench.errors import AttackNotApplicableError
from privbench.payloads.kinds import Carries
from privbench.schema import Fraction, PositiveInt, PublicImages

PRIORS = ("public", "uniform")
#: Candidates the selection considers, per image of the batch (the most zeros first).
POOL = 4
#: Two unit directions whose |cosine| is above this are one (drawn twice, their zeros differing by round-off).
SAME = 1 - 1e-6
#: Most swaps the selection makes, per image of the batch.
SWAPS = 4
#: How the rebuilt inputs are labelled.
LABELS = "recovered: the class whose loss gradient at the rebuilt input matches its column of the layer's"


class SPEAR(Attack[AttackTarget | LabelView, Reconstruction]):
    """Exact recovery of every input of a batch from the first linear layer's weight and bias gradients.

    Args:
        samples: most row sets drawn (the attack's budget; the chance that one set lands in one input's off units
            falls about 2x per image of the batch, so the budget bounds the batch it can open).
        chunk: row sets solved at once.
        prior: ``public``: every other chunk of row sets drawn in proportion to each unit's odds of being off on
            public images (the server holds the layer's weights), the others uniformly; ``uniform``: all uniformly,
            as in the paper.
        max_images: refuse messages holding more images.
        public: public test-split images the prior is measured on.
        sparsity: least share of the live units a direction must switch off to be tested (the paper's tau; a
            spurious direction zeroes its B - 1 drawn rows and few more, a true one the units its input leaves off).
    """

    name = "spear"
    reads: ClassVar[frozenset[Carries]] = frozenset({"gradient", "model"})
    view: ClassVar[ViewKind] = "labels"

    def __init__(self, *, samples: PositiveInt = 2_000_000, chunk: PositiveInt = 10_000, prior: str = "public",
                 max_images: PositiveInt = 64, public: PublicImages = 2000, sparsity: Fraction = 0.3) -> None:
        if prior not in PRIORS:
            raise ValueError(f"attack.prior={prior!r} is not one of {', '.join(PRIORS)}")
        if samples < 1 or chunk < 1 or max_images < 2:
            raise ValueError("attack.samples and attack.chunk must be >= 1 and attack.max_images >= 2")
        self.samples, self.chunk, self.prior, self.max_images, self.public = samples, chunk, prior, max_images, public
        self.sparsity = sparsity

    def budget(self) -> dict[str, Any]:
        """Row sets drawn at most, how they are drawn, and the zero tolerance."""
        return {"samples": self.samples, "chunk": self.chunk, "prior": self.prior, "sparsity": self.sparsity,
                "zero": exact.ZERO}

    def check_model(self, model: nn.Module, image_shape: tuple[int, ...]) -> None:
        first_linear(model, image_shape, attack=self.name)

    def attack(self, view: AttackTarget | LabelView, *, seed: int) -> Reconstruction:
        target = view.target if isinstance(view, LabelView) else view
        name, layer = first_linear(target.model, target.image_shape, attack=self.name)
        batch = target.num_images
        if batch > self.max_images or batch < 1:
            raise AttackNotApplicableError(f"attack spear rebuilds 1 to attack.max_images={self.max_images} images; "
                                           f"this message holds {batch}")
        grads = [target.gradient.get(f"{name}.{p}") for p in ("weight", "bias")]
        if grads[0] is None or grads[1] is None:
            raise AttackNotApplicableError(f"attack spear needs the gradient of {name}.weight and {name}.bias; the "
                                           "message does not carry both")
        if batch > layer.out_features:
            raise AttackNotApplicableError(f"attack spear needs at most as many images as {name} has units "
                                           f"({layer.out_features}); this message holds {batch}")
        sees_input(target, layer, name, attack=self.name)
        start = time.perf_counter()
        try:
            a, v, gap = exact.factor(grads[0].detach().cpu(), batch)
        except ValueError as error:
            raise AttackNotApplicableError(f"attack spear: {error}") from None
        live = a.norm(dim=1) > 1e-9 * a.norm(dim=1).max()
        found = Factors(target, layer, a, v, live, grads[1].detach().cpu().double())
        weights = found.off_odds(view.public) if self.prior == "public" and isinstance(view, LabelView) else None
        best, pool, drawn = self.search(found, batch, weights, seed=seed)
        log: dict[str, Any] = {"status": "solved" if best is not None else "budget", "directions": pool,
                               "samples": drawn, "rank_gap": float(gap)}
        if best is None:
            log["seconds"] = round(time.perf_counter() - start, 3)
            return Reconstruction([log], info={"exact": log}, label_source="none")
        log.update(certified=best.count, seconds=round(time.perf_counter() - start, 3))
        images = best.inputs.float().reshape(batch, *target.image_shape).to(target.device)
        return Reconstruction([log], images=images, labels=best.labels.to(target.device), objective=0.0,
                              label_source=best.source, info={"exact": log, "certified": best.certified.tolist()})

    def search(self, found: Factors, batch: int, weights: torch.Tensor | None, *,
               seed: int) -> tuple[Solution | None, int, int]:
        """Draw row sets until every rebuilt input is certified or the budget is spent: ``(the best solution, the
        directions that passed the pattern test, the row sets drawn)``."""
        if batch == 1:
            return found.solve([torch.ones(1, dtype=torch.float64)]), 1, 0
        generator = torch.Generator().manual_seed(seed * 7907 + 5)
        pool: list[tuple[torch.Tensor, torch.Tensor]] = []  # (direction, its zeros)
        seen: set[bytes] = set()
        drawn, best = 0, None
        a = found.a[found.live]
        basis, w, b = found.v.numpy(), found.weight[found.live].numpy(), found.bias[found.live].numpy()
        need = max(batch, math.ceil(self.sparsity * len(a)))  # more zeros than the B - 1 forced ones
        while drawn < self.samples and (best is None or best.count < batch):
            count = min(self.chunk, self.samples - drawn)
            mixed = weights if (drawn // self.chunk) % 2 == 0 else None  # every other chunk uniform: an input
            q = exact.sample_directions(a, count, weights=mixed, generator=generator)  # unlike the public data
            drawn += count
            off = exact.zeros(a, q)
            grew = False
            for k in torch.nonzero(off.sum(1) >= need)[:, 0].tolist():
                key = off[k].numpy().tobytes()
                if key not in seen:
                    seen.add(key)
                    q[k] = exact.refine(a, q[k])
                    same = bool(pool) and float(found.cosines(torch.stack([d for d, _ in pool]), q[k]).max()) > SAME
                    if not same and exact.pattern_margin(off[k].numpy(), w, b, basis) > 0:
                        pool.append((q[k], off[k]))
                        grew = True
            if grew and len(pool) >= batch:
                best = select(found, exact.ranked(pool)[:POOL * batch], batch, best)
        return best, len(pool), drawn



@dataclass
class Solution:
    """``B`` directions and what they give: the inputs, their labels and how, and which inputs are certified."""

    directions: list[torch.Tensor]
    inputs: torch.Tensor
    labels: torch.Tensor
    source: str
    certified: torch.Tensor
    errors: torch.Tensor

    @property
    def count(self) -> int:
        """Certified inputs."""
        return int(self.certified.sum())

    def better(self, other: "Solution | None") -> bool:
        """More certified inputs, or as many with a smaller summed log value error (a direction nearer the truth
        moves every input of the batch nearer)."""
        if other is None or self.count != other.count:
            return other is None or self.count > other.count
        return float(self.errors.clamp(1e-12, 1e6).log().sum()) < float(other.errors.clamp(1e-12, 1e6).log().sum()) - 1e-6


@dataclass
class Factors:
    """The message's first layer as the attack factorises it: ``G = A V``, the units some input switched on."""

    target: AttackTarget
    layer: nn.Linear
    a: torch.Tensor
    v: torch.Tensor
    live: torch.Tensor
    bias_grad: torch.Tensor

    @cached_property
    def weight(self) -> torch.Tensor:
        """The layer's weight, float64 on the CPU (copied once: every solve reads it)."""
        return self.layer.weight.detach().double().cpu()

    @cached_property
    def bias(self) -> torch.Tensor:
        """The layer's bias, float64 on the CPU."""
        return self.layer.bias.detach().double().cpu()

    def off_odds(self, public: torch.Tensor) -> torch.Tensor:
        """Each live unit's odds of being off on the ``public`` images (clamped to [1e-3, 1e3])."""
        pre = public.detach().cpu().double().flatten(1) @ self.weight.T + self.bias
        off = (pre <= 0).double().mean(0).clamp(1e-3 / 1.001, 1 - 1e-3 / 1.001)[self.live]
        return off / (1 - off)

    def cosines(self, directions: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """|cosine| between the output gradients ``A d`` of each of ``directions`` and ``A q``."""
        mine, theirs = self.a @ q, directions @ self.a.T
        return (theirs @ mine).abs() / (theirs.norm(dim=1) * mine.norm()).clamp(min=1e-300)

    def independent(self, directions: list[torch.Tensor]) -> bool:
        """Whether the output gradients the ``directions`` give are independent (their unit stack's smallest
        singular value above 1e-6)."""
        grads = torch.stack(directions) @ self.a.T
        return float(torch.linalg.svdvals(grads / grads.norm(dim=1, keepdim=True))[-1]) > 1e-6

    def solve(self, directions: list[torch.Tensor]) -> Solution | None:
        """The inputs the ``directions`` give, labelled and certified; None when they are not independent."""
        if not self.independent(directions):
            return None
        q = torch.stack(directions)
        inputs, out_grad = exact.solve_inputs(self.a, q, self.v, self.bias_grad)
        target = self.target
        images = inputs.to(self.layer.weight.dtype).reshape(len(inputs), *target.image_shape).to(target.device)
        backprop = self.backprop(images)  # [m, B, classes]
        errors, labels = exact.value_error(out_grad, backprop).min(1)
        chosen = backprop[:, torch.arange(len(labels)), labels]
        certified = exact.certify(inputs, out_grad, self.weight, self.bias, self.live, chosen)
        return Solution(directions, inputs, labels, LABELS, certified, errors)

    def backprop(self, images: torch.Tensor) -> torch.Tensor:
        """``[m, B, classes]``: the loss gradient at the layer's output for each image alone under each label."""
        return layer_gradients(self.target.model, self.layer, images, self.target.num_classes)


def select(found: Factors, pool: list[torch.Tensor], batch: int, best: Solution | None) -> Solution | None:
    """The best ``batch`` directions of ``pool`` (most zeros first) by certified inputs: the certified directions
    of ``best`` kept, the rest filled in order, then one uncertified direction swapped at a time while that
    certifies more."""
    chosen = [d for d, ok in zip(best.directions, best.certified.tolist()) if ok] if best is not None else []
    for d in pool:
        if len(chosen) == batch:
            break
        if found.independent([*chosen, d]):
            chosen.append(d)
    result = found.solve(chosen) if len(chosen) == batch else None
    if result is None:
        return best
    for _ in range(SWAPS * batch if result.count < batch else 0):  # a swap that certifies more, or moves the inputs nearer, is kept
        trial = next((t for position in torch.nonzero(~result.certified)[:, 0].tolist() for d in pool
                      if not any(torch.equal(d, c) for c in result.directions)
                      and (t := found.solve([*result.directions[:position], d, *result.directions[position + 1:]]))
                      is not None and t.better(result)), None)
        if trial is None:
            break
        result = trial
        if result.count == batch:
            break
    return result if result.better(best) or best is None else best

