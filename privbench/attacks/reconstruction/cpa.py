"""The Cocktail Party Attack (Kariyappa et al., ICML 2023): a batch, or a whole cohort's sum, separated from the
first fully connected layer's gradient by independent component analysis (``ica.py``); privbench's version then
pins, certifies and peels the inputs it finds (``peeling.py``)."""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar

import torch

from privbench.attacks.base import Attack
from privbench.attacks.reconstruction import ica
from privbench.attacks.reconstruction.findings import Reconstruction
from privbench.attacks.reconstruction.first_layer import first_linear, layer_gradients, sees_input
from privbench.attacks.reconstruction.peeling import RANGE, SPAN, Mixture
from privbench.attacks.target import AttackTarget
from privbench.attacks.views import ViewKind
from privbench.errors import AttackNotApplicableError
from privbench.payloads.kinds import Carries
from privbench.schema import Count, FractionList, Iterations, NonNegative, Positive, PositiveInt, Switch

UNMIXINGS = ("fixed_point", "paper")
#: At most this many inputs left, each round also draws ``DRAWS`` sets of background pixels (``Mixture.vertices``).
SMALL, DRAWS = 12, 2000
#: How the rebuilt inputs are labelled.
LABELS = "recovered: the class whose loss gradient at the rebuilt input lies nearest the layer's gradient's span"


class CocktailParty(Attack[AttackTarget, Reconstruction]):
    """Blind source separation of the first linear layer's weight gradient, each input's scale and sign fixed by the
    bias gradient (no ground truth), then pinned, certified and peeled round after round.

    Args:
        unmixing: ``fixed_point``: one-unit FastICA with the Gaussian contrast from ``starts`` random starts on
            the gradient's edges (horizontal and vertical pixel differences), candidates ranked by how far they
            leave the pixel range; ``paper``: the paper's unmixing, Adam on the whitened gradient from the
            identity with its decorrelation and total-variation terms (its FC2 settings by default).
        starts: fixed-point starts per round.
        iterations: fixed-point iterations.
        contrast: ``gauss`` or ``logcosh`` (fixed-point).
        steps, lr, temperature, decorrelation, total_variation, negentropy: the paper's unmixing.
        peel: pin the candidates to their black backgrounds, certify them and peel the certified off, for up to
            ``rounds`` rounds; ``patience`` rounds in a row that certify nothing are tolerated, the next one stops it;
            off: one separation.
        shares: each candidate is pinned once per share: its pixels within that share of its range of black are
            taken for its background.
        max_images: refuse messages holding more images.
    """

    name = "cpa"
    reads: ClassVar[frozenset[Carries]] = frozenset({"gradient", "model"})
    view: ClassVar[ViewKind] = "gradient"

    def __init__(self, *, unmixing: str = "fixed_point", starts: PositiveInt = 2000, iterations: Iterations = 200,
                 contrast: str = "gauss", steps: Iterations = 25000, lr: Positive = 1e-3, temperature: Positive = 12.4,
                 decorrelation: NonNegative = 1.47, total_variation: NonNegative = 3.1, negentropy: NonNegative = 1.0,
                 peel: Switch = True, rounds: PositiveInt = 40, patience: Count = 3,
                 shares: Annotated[Sequence[float], FractionList()] = (0.02, 0.05, 0.1, 0.2),
                 max_images: PositiveInt = 256) -> None:
        if unmixing not in UNMIXINGS:
            raise ValueError(f"attack.unmixing={unmixing!r} is not one of {', '.join(UNMIXINGS)}")
        if contrast not in ica.CONTRASTS:
            raise ValueError(f"attack.contrast={contrast!r} is not one of {', '.join(ica.CONTRASTS)}")
        self.unmixing, self.starts, self.iterations, self.contrast = unmixing, starts, iterations, contrast
        self.steps = steps
        self.paper = {"lr": lr, "temperature": temperature, "decorrelation": decorrelation,
                      "total_variation": total_variation, "negentropy": negentropy}
        if not shares or any(not 0 < s < 1 for s in shares):
            raise ValueError(f"attack.shares={list(shares)}: each must lie in (0, 1)")
        self.peel, self.rounds, self.patience, self.max_images = peel, rounds, patience, max_images
        self.shares = tuple(float(s) for s in shares)

    def budget(self) -> dict[str, Any]:
        """The separation's settings and the peeling's rounds."""
        spent: dict[str, Any] = {"unmixing": self.unmixing, "peel": self.peel, "rounds": self.rounds if self.peel else 1,
                                 "patience": self.patience, "shares": list(self.shares), "span": SPAN}
        if self.unmixing == "fixed_point":
            spent.update(starts=self.starts, fixed_point_iterations=self.iterations, contrast=self.contrast)
        else:
            spent.update(adam_steps=self.steps, **self.paper)
        return spent

    def check_model(self, model: torch.nn.Module, image_shape: tuple[int, ...]) -> None:
        first_linear(model, image_shape, attack=self.name)

    def attack(self, view: AttackTarget, *, seed: int) -> Reconstruction:
        name, layer = first_linear(view.model, view.image_shape, attack=self.name)
        batch = view.num_images
        if not 2 <= batch <= min(self.max_images, layer.out_features):
            raise AttackNotApplicableError(
                f"attack cpa separates 2 to min(attack.max_images={self.max_images}, {name}'s {layer.out_features} "
                f"units) images; this message holds {batch}")
        grads = [view.gradient.get(f"{name}.{p}") for p in ("weight", "bias")]
        if grads[0] is None or grads[1] is None:
            raise AttackNotApplicableError(f"attack cpa needs the gradient of {name}.weight and {name}.bias (the bias "
                                           "fixes each input's scale and sign); the message does not carry both")
        sees_input(view, layer, name, attack=self.name)
        if view.bounds is None:
            raise AttackNotApplicableError("attack cpa needs the pixel range in the model's input space (the "
                                           "normalisation), to rank and pin its candidates")
        low, high = (v.detach().cpu().double().expand(view.image_shape).flatten() for v in view.bounds)
        mixture = Mixture(grads[0].detach().cpu().double(), grads[1].detach().cpu().double(), batch, low)
        start, generator = time.perf_counter(), torch.Generator().manual_seed(seed * 7919 + 11)
        found: list[torch.Tensor] = []
        labels: list[int] = []
        log: list[dict[str, Any]] = []
        misses, stale = 0, True
        for round_ in range(self.rounds if self.peel else 1):
            candidates = self.candidates(mixture, view.image_shape, low, high, generator)
            stale = False
            if not self.peel or not mixture.certifiable:
                break
            pinned = torch.cat([mixture.pin(candidates, share=share, iterations=30) for share in self.shares])
            if mixture.rank <= SMALL:  # few inputs left: draw their background pixels outright
                drawn = mixture.vertices(DRAWS, generator=generator)
                pinned = torch.cat([pinned, drawn[ica.violation(drawn, low, high) <= RANGE * float((high - low).max())]])
            certified, classes, out_grads = self.certify(view, layer, mixture, pinned, low, high)
            log.append({"round": round_, "rank": mixture.rank, "certified": len(certified)})
            misses = 0 if certified else misses + 1
            if certified:
                found += [pinned[i] for i in certified]
                labels += classes
                mixture, stale = mixture.peel(pinned[certified], out_grads), True
            if mixture.rank < 1 or misses > self.patience:
                break
        if stale and mixture.rank >= 1:  # the last round's candidates held inputs since peeled
            candidates = self.candidates(mixture, view.image_shape, low, high, generator)
        rest = self.fill(view, layer, mixture, candidates, batch - len(found))
        images = torch.cat([torch.stack(found), rest[0]]) if found else rest[0]
        flags = [True] * len(found) + [False] * len(rest[0])
        info = {"rounds": log, "certified": flags, "seconds": round(time.perf_counter() - start, 3),
                "certifiable": mixture.certifiable or bool(found)}
        return Reconstruction([info], images=images.float().reshape(batch, *view.image_shape).to(view.device),
                              labels=torch.tensor(labels + rest[1]).to(view.device), objective=0.0,
                              label_source=LABELS, info=info)

    def candidates(self, mixture: Mixture, image_shape: tuple[int, ...], low: torch.Tensor, high: torch.Tensor,
                   generator: torch.Generator) -> torch.Tensor:
        """``separate``, its failure refused in one line."""
        try:
            return self.separate(mixture, image_shape, low, high, generator)
        except ValueError as error:
            raise AttackNotApplicableError(f"attack cpa: {error}") from None

    def separate(self, mixture: Mixture, image_shape: tuple[int, ...], low: torch.Tensor, high: torch.Tensor,
                 generator: torch.Generator) -> torch.Tensor:
        """Distinct candidate inputs of ``mixture`` (at most its rank), the least out of the pixel range first."""
        g, b, rank = mixture.weight_grad, mixture.bias_grad, mixture.rank
        if self.unmixing == "fixed_point":
            k, z, _ = ica.whiten(ica.edges(g, image_shape), rank)
            unmixing = ica.fixed_points(z, self.starts, iterations=self.iterations, generator=generator,
                                        contrast=self.contrast) @ k
        else:
            k, z, _ = ica.whiten(g, rank)
            mean = k @ g.mean(1, keepdim=True).expand_as(g)
            unmixing = ica.paper_unmixing(z, mean, image_shape, steps=self.steps, **self.paper) @ k
        inputs = ica.as_inputs(unmixing, g, b)
        order = ica.violation(inputs, low, high).argsort()
        return inputs[ica.distinct(inputs, order, rank)]

    def certify(self, view: AttackTarget, layer: torch.nn.Linear, mixture: Mixture, pinned: torch.Tensor,
                low: torch.Tensor, high: torch.Tensor) -> tuple[list[int], list[int], torch.Tensor]:
        """The distinct pinned inputs that pass the certificate (in the pixel range, their loss gradient in the
        mixture's span), their labels and those gradients (``[m, k]``)."""
        gradients = self.layer_gradients(view, layer, pinned)
        nearest, classes = mixture.residuals(gradients).min(1)
        span = float((high - low).max())
        inside = ica.violation(pinned, low, high) <= RANGE * span
        passed = torch.nonzero((nearest <= SPAN) & inside)[:, 0]
        if not len(passed):
            return [], [], torch.empty(0)
        keep = [int(passed[i]) for i in ica.distinct(pinned[passed], torch.arange(len(passed)), len(passed))]
        keep = keep[:mixture.rank]
        return keep, classes[keep].tolist(), gradients[:, keep, :][:, torch.arange(len(keep)), classes[keep]]

    def fill(self, view: AttackTarget, layer: torch.nn.Linear, mixture: Mixture, candidates: torch.Tensor,
             count: int) -> tuple[torch.Tensor, list[int]]:
        """``count`` uncertified inputs from the last round's candidates (repeated when too few; a mixture of rank
        1 or more always gives one), each labelled by the class whose gradient lies nearest the span."""
        if count <= 0:
            return candidates[:0], []
        picked = candidates[torch.arange(count) % len(candidates)]
        classes = mixture.residuals(self.layer_gradients(view, layer, picked)).argmin(1)
        return picked, classes.tolist()

    @staticmethod
    def layer_gradients(view: AttackTarget, layer: torch.nn.Linear, inputs: torch.Tensor) -> torch.Tensor:
        images = inputs.to(layer.weight.dtype).reshape(len(inputs), *view.image_shape).to(view.device)
        return layer_gradients(view.model, layer, images, view.num_classes)
