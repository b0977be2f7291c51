"""Inverting Gradients (Geiping et al., 2020): cosine matching + total variation, signed Adam, boxed pixels."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from privbench.attacks.labels.counts import check_label_rule, counted, with_counted_labels
from privbench.attacks.labels.recovery import known_labels
from privbench.attacks.labels.views import LabelView
from privbench.attacks.reconstruction.base import Attempt, GradientInversion
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.attacks.reconstruction.matching import candidate_gradient
from privbench.attacks.reconstruction.objectives import cosine_distance, total_variation
from privbench.attacks.reconstruction.stacked import StackedModel, unstackable
from privbench.attacks.target import AttackTarget
from privbench.attacks.views import ViewKind
from privbench.schema import Iterations, PositiveInt, PublicImages, Rate, Restarts, Switch, Weight

#: Batched restarts run on a stacked model where the model allows it (else ``torch.func.vmap``).
STACKED = True


#: One batched Adam step's objective: ``(images, label_logits) -> (leaf gradients, objective per problem)``.
Step = Callable[[torch.Tensor, "torch.Tensor | None"], tuple[tuple[torch.Tensor, ...], torch.Tensor]]


class InvertingGradients(GradientInversion):
    """Minimise ``1 - cos(g(x), g_obs) + tv * TV(x)`` over images ``x``.

    Adam on the sign of the image gradient, learning rate decayed x0.1 at 3/8, 5/8 and 7/8
    of the iterations, pixels clamped to the valid range after every step. Labels are read
    off the head's gradient when the payload carries it; otherwise label logits are
    optimised jointly (plain Adam); for a batch the labels are the per-class counts recovered from the head's weight
    and bias gradients (``labels=auto``, as iDLG). Restarts are scored by the final objective.

    Args:
        lr: Adam learning rate on the images.
        tv: weight of total variation.
        iterations: Adam steps per attempt.
        restarts: attempts; the lowest final objective wins.
        batched: run all restarts as one optimisation (equal to one by one,
            within float tolerance) where the target allows it: no unrolled training and no
            batch-norm buffers in the model.
        labels: ``auto``, ``counts``, ``sign`` or ``oracle`` (a control; ``labels.counts.LABEL_RULES``).
        public: labelled test-split images (no client holds them) the counts are estimated with.
    """

    name = "ig"
    view: ClassVar[ViewKind] = "labels"

    def __init__(self, *, iterations: Iterations = 1000, restarts: Restarts = 2, lr: Rate = 0.1, tv: Weight = 1e-3,
                 unroll: Switch = False, max_images: PositiveInt = 64, batched: Switch = True, labels: str = "auto",
                 public: PublicImages = 2000) -> None:
        super().__init__(iterations=iterations, restarts=restarts, converged=0.0, stall_at=1.0, stall_tol=math.inf,
                         unroll=unroll, max_images=max_images)
        if lr <= 0 or tv < 0:
            raise ValueError("attack.lr must be > 0 and attack.tv >= 0")
        check_label_rule(labels, public)
        self.lr, self.tv, self.batched, self.labels, self.public = lr, tv, batched, labels, public

    def attack(self, view: AttackTarget | LabelView, *, seed: int) -> Reconstruction:
        target = with_counted_labels(view, self.labels, seed=seed)
        found = super().attack(target, seed=seed)
        found.info["label_counts"] = counted(target)
        return found

    def label_source(self, target: AttackTarget) -> str:
        return target.head_label_source

    def budget(self) -> dict[str, Any]:
        """Restarts x Adam steps, and the settings that shape them."""
        return {**super().budget(), "optimiser": "signed Adam", "lr": self.lr, "tv": self.tv, "unroll": self.unroll,
                "labels": self.labels}

    def attempt(self, target: AttackTarget, *, generator: torch.Generator) -> Attempt:
        n = target.num_images
        images = target.randn(n, *target.image_shape, generator=generator)
        target.clamp_(images)
        images.requires_grad_(True)
        labels = known_labels(target)
        logits = None if labels is not None else target.randn(n, target.num_classes, generator=generator).requires_grad_(True)
        optimizer = torch.optim.Adam([images] + ([logits] if logits is not None else []), lr=self.lr)
        milestones = [int(self.iterations * f) for f in (3 / 8, 5 / 8, 7 / 8)]
        scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=milestones, gamma=0.1)
        value, status = math.inf, "budget"
        with self.progress(desc=self.name) as bar:
            for it in range(1, self.iterations + 1):
                optimizer.zero_grad()
                grads = candidate_gradient(target, images, labels=labels, label_logits=logits)
                loss = cosine_distance(grads, target.gradient) + self.tv * total_variation(images)
                signed_adam_step(loss, [images] + ([logits] if logits is not None else []), optimizer, scheduler,
                                 target)
                value = float(loss.detach())
                bar.update(1, objective=value)
                if not math.isfinite(value) or not torch.isfinite(images).all():
                    return Attempt(images.detach(), self._labels(labels, logits), math.nan, "nan", it)
        return Attempt(images.detach(), self._labels(labels, logits), value, status, self.iterations)

    def batched_attempts(self, target: AttackTarget, *, generators: list[torch.Generator]) -> list[Attempt] | None:
        """Every restart in one batched optimisation (``privbench/attacks/reconstruction/stacked.py``, else vmap): Adam and clamping
        act elementwise, so each restart follows exactly the path it would alone; a restart that turns NaN
        keeps its state from then on."""
        together = self._batched([target], generators=generators)
        return None if together is None else together[0]

    def attack_many(self, views: list[Any], *, seed: int) -> list[Reconstruction]:
        """Every target's restarts in one batched optimisation, each result equal to ``attack`` on that target alone."""
        if len(views) < 2:
            return super().attack_many(views, seed=seed)
        targets = [with_counted_labels(v, self.labels, seed=seed) for v in views]
        generators = [torch.Generator().manual_seed(seed * 1000 + k) for k in range(self.restarts)]
        for target in targets:
            self.check_size(target)
        before = [t.evaluations for t in targets]
        together = self._batched(targets, generators=generators)
        if together is None:
            return super().attack_many(targets, seed=seed)
        found: list[Reconstruction] = [
            self.result(target, attempts, [(target.evaluations - b) // len(attempts)] * len(attempts))
            for target, attempts, b in zip(targets, together, before)]
        for target, finding in zip(targets, found):
            finding.info["label_counts"] = counted(target)
        return found

    def _batched(self, targets: list[AttackTarget], *, generators: list[torch.Generator]) -> list[list[Attempt]] | None:
        """Restarts of every target as one optimisation (a stacked model, else vmap); None where a target rules
        it out (unrolled training, declared clipping, batch-norm buffers, targets that differ in shape, visible names or label
        source)."""
        first = targets[0]
        if not self.batched or not _batchable(targets):
            return None
        model, restarts = first.model, len(generators)
        problems = [(t, k) for t in targets for k in range(restarts)]  # target-major, restarts in order
        hard = None
        if known_labels(first) is not None:
            hard = torch.stack([known_labels(t) for t, _ in problems])  # type: ignore[misc]
        images, logits = _starts(targets, generators, labels_known=hard is not None)
        watched = list(first.gradient)
        observed = {k: torch.stack([t.gradient[k] for t, _ in problems]) for k in watched}
        named: list[dict[str, torch.Tensor]] = [dict(t.model.named_parameters()) for t, _ in problems]
        if STACKED and unstackable(model) is None:
            step = self._stacked_step(StackedModel(model, named), observed, hard)
        else:
            step = self._vmapped_step(model, named, observed, hard)
        leaves = [images] + ([logits] if logits is not None else [])
        optimizer = torch.optim.Adam(leaves, lr=self.lr)
        milestones = [int(self.iterations * f) for f in (3 / 8, 5 / 8, 7 / 8)]
        scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=milestones, gamma=0.1)
        count, done = len(problems), dict[int, Attempt]()
        values = torch.full((count,), math.inf, device=images.device)

        def labels_of(k: int) -> torch.Tensor:
            return self._labels(None if hard is None else hard[k], None if logits is None else logits[k])

        desc = f"{self.name} ({restarts} restarts" + (f" x {len(targets)} victims" if len(targets) > 1 else "") + \
            " batched)"
        with self.progress(desc=desc) as bar:
            for it in range(1, self.iterations + 1):
                optimizer.zero_grad()
                grads, values = step(images, logits)
                for target in targets:
                    target.evaluations += restarts
                for leaf, g in zip(leaves, grads):
                    leaf.grad = g.detach().clone()
                assert images.grad is not None
                images.grad.sign_()
                frozen = [k for k in done]
                kept = [leaf.detach()[frozen].clone() for leaf in leaves] if frozen else []
                optimizer.step()
                scheduler.step()
                first.clamp_(images)
                with torch.no_grad():
                    for leaf, old in zip(leaves, kept):
                        leaf[frozen] = old
                values = values.detach()
                bar.update(1, objective=float(values.min()))
                for k in range(count):
                    if k not in done and (not math.isfinite(float(values[k])) or not torch.isfinite(images[k]).all()):
                        done[k] = Attempt(images[k].detach().clone(), labels_of(k), math.nan, "nan", it)
                if len(done) == count:
                    break
        attempts = [done.get(k) or Attempt(images[k].detach(), labels_of(k), float(values[k]), "budget",
                                           self.iterations) for k in range(count)]
        return [attempts[i * restarts:(i + 1) * restarts] for i in range(len(targets))]

    def _stacked_step(self, stack: StackedModel, observed: dict[str, torch.Tensor],
                      hard: torch.Tensor | None) -> Step:
        """The objective and its leaf gradients for every problem at once, by plain autograd on ``stack``."""
        names = list(observed)
        weights = stack.watch(names)
        observed_norm = torch.stack([(g ** 2).flatten(1).sum(1) for g in observed.values()]).sum(0).sqrt()

        def step(images: torch.Tensor, logits: torch.Tensor | None) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
            out = stack(images)
            if hard is not None:
                loss = F.cross_entropy(out.flatten(0, 1), hard.flatten(), reduction="none").view(hard.shape).mean(1)
            else:
                assert logits is not None
                loss = torch.sum(-F.softmax(logits, dim=-1) * F.log_softmax(out, dim=-1), dim=-1).mean(1)
            grads = torch.autograd.grad(loss.sum(), weights, create_graph=True)
            dot = torch.stack([(g * observed[k]).flatten(1).sum(1) for g, k in zip(grads, names)]).sum(0)
            cand = torch.stack([(g ** 2).flatten(1).sum(1) for g in grads]).sum(0)
            value = 1 - dot / (cand.sqrt() * observed_norm + 1e-12) + self.tv * total_variation(images, each=True)
            leaves = [images] + ([logits] if logits is not None else [])
            return torch.autograd.grad(value.sum(), leaves), value.detach()

        return step

    def _vmapped_step(self, model: torch.nn.Module, named: list[dict[str, torch.Tensor]],
                      observed: dict[str, torch.Tensor], hard: torch.Tensor | None) -> Step:
        """The same step by ``torch.func.vmap`` over a functional model (any model without buffers)."""
        from torch.func import functional_call, grad_and_value, vmap

        from privbench.attacks.reconstruction.matching import candidate_loss

        watched = list(observed)
        params = {k: torch.stack([p[k].detach() for p in named]) for k, _ in model.named_parameters()}

        def objective(x: torch.Tensor, soft: torch.Tensor | None, named: dict[str, torch.Tensor],
                      seen: dict[str, torch.Tensor], labels: torch.Tensor | None) -> torch.Tensor:
            def loss_of(p: dict[str, torch.Tensor]) -> torch.Tensor:
                return candidate_loss(functional_call(model, {**named, **p}, (x,)), labels, soft)

            grads = torch.func.grad(loss_of)({k: named[k] for k in watched})
            return cosine_distance(grads, seen) + self.tv * total_variation(x)

        soft = hard is None  # label logits are optimised exactly when labels are not known
        batched = vmap(grad_and_value(objective, argnums=(0, 1) if soft else 0),
                       in_dims=(0, 0 if soft else None, 0, 0, None if soft else 0))

        def step(images: torch.Tensor, logits: torch.Tensor | None) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
            grads, values = batched(images, logits, params, observed, hard)
            return (grads if isinstance(grads, tuple) else (grads,)), values

        return step

    @staticmethod
    def _labels(labels: torch.Tensor | None, logits: torch.Tensor | None) -> torch.Tensor:
        if labels is not None:
            return labels
        assert logits is not None
        return logits.detach().argmax(1)


def _batchable(targets: list[AttackTarget]) -> bool:
    """Whether the targets' restarts can run as one optimisation: no unrolled training, declared clipping or
    batch-norm buffers, and the same shape, visible names and label source throughout."""
    first = targets[0]
    if any(t.unroll is not None or t.clip is not None or any(True for _ in t.model.buffers()) for t in targets):
        return False
    return all((t.num_images, t.image_shape, list(t.gradient), known_labels(t) is None) ==
               (first.num_images, first.image_shape, list(first.gradient), known_labels(first) is None)
               for t in targets[1:])


def _starts(targets: list[AttackTarget], generators: list[torch.Generator], *, labels_known: bool
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Every restart's starting images (and label logits, where the labels are not known), target-major, drawn as
    ``attempt`` draws them from a fresh copy of each generator."""
    starts, logit_starts = [], []
    for target in targets:
        for generator in [torch.Generator().manual_seed(g.initial_seed()) for g in generators]:
            x = target.randn(target.num_images, *target.image_shape, generator=generator)
            target.clamp_(x)
            starts.append(x)
            if not labels_known:
                logit_starts.append(target.randn(target.num_images, target.num_classes, generator=generator))
    images = torch.stack(starts).requires_grad_(True)
    return images, (None if labels_known else torch.stack(logit_starts).requires_grad_(True))


def signed_adam_step(loss: torch.Tensor, leaves: list[torch.Tensor], optimizer: torch.optim.Optimizer,
                     scheduler: Any, target: AttackTarget) -> None:
    """One Inverting Gradients step: the gradient of ``loss`` on ``leaves``, the images' (the first leaf) replaced
    by its sign, Adam and its schedule, then the images boxed to the pixel range."""
    for leaf, g in zip(leaves, torch.autograd.grad(loss, leaves)):
        leaf.grad = g
    images = leaves[0]
    assert images.grad is not None
    images.grad.sign_()
    optimizer.step()
    scheduler.step()
    target.clamp_(images)
