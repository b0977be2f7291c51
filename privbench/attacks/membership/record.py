"""Record-level membership inference on one client's message: was this candidate record in its training?

Three published tests, each a score per candidate (higher: more likely a member):

- ``loss`` (Yeom et al., 2018): the released model's loss on the record, negated. Needs a model payload.
- ``loss_change`` (difficulty calibration, Watson et al., 2022; the FL form in Nasr et al., 2019): the loss
  under the weights the client started from minus the loss under the weights it sent, so records that
  are easy for any model do not look like members. Needs a model payload and its base.
- ``gradient_alignment`` (white-box, after Nasr et al., 2019): the cosine between the record's gradient at
  the base weights and the message's descent direction (a gradient payload, or ``base - weights`` of a
  model payload), over the tensors the message carries.

A learnGene upload carries only some layers: the released model is the base with those layers replaced.
LiRA (Carlini et al., 2022), which calibrates each record against shadow models, is not here yet.
"""
from __future__ import annotations

from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from privbench.attacks.base import Attack
from privbench.attacks.membership.findings import MembershipScores
from privbench.attacks.membership.views import MembershipView
from privbench.attacks.views import ViewKind, at_weights
from privbench.errors import AttackNotApplicableError
from privbench.payloads import kind as payload_kind
from privbench.payloads.kinds import Carries
from privbench.progress import phase
from privbench.schema import Candidates, ScoringBatch

Test = Literal["loss", "loss_change", "gradient_alignment"]
TESTS: tuple[Test, ...] = ("loss", "loss_change", "gradient_alignment")


class MembershipInference(Attack[MembershipView, MembershipScores]):
    """Score every candidate record of a ``MembershipView`` with one test.

    Args:
        test: ``loss``, ``loss_change`` or ``gradient_alignment`` (module docstring).
        max_candidates: most candidate records (members and as many class-matched non-members) per message.
        batch_size: candidates scored at once.
    """

    name = "membership"
    reads: ClassVar[frozenset[Carries]] = frozenset({"model", "gradient"})
    view: ClassVar[ViewKind] = "membership"

    def __init__(self, *, test: Test = "loss_change", max_candidates: Candidates = 1000,
                 batch_size: ScoringBatch = 256) -> None:
        if test not in TESTS:
            raise ValueError(f"attack.test={test!r}: allowed {', '.join(TESTS)}")
        if max_candidates < 2 or batch_size < 1:
            raise ValueError("attack.max_candidates must be >= 2 and attack.batch_size >= 1")
        self.test, self.max_candidates, self.batch_size = test, max_candidates, batch_size

    def cannot_read(self, kind: str) -> str | None:
        reason = super().cannot_read(kind)
        if reason is None and self.test in ("loss", "loss_change") and payload_kind(kind).carries != "model":
            return f"attack.test={self.test} needs a model payload; use attack.test=gradient_alignment for a {kind}"
        return reason

    def attack(self, view: MembershipView, *, seed: int) -> MembershipScores:
        """One score per candidate, in the pool's order (deterministic: ``seed`` is not needed)."""
        del seed
        if self.test in ("loss_change", "gradient_alignment") and view.base is None:
            raise AttackNotApplicableError(f"attack.test={self.test} needs the weights the client started from; "
                                           f"the server did not keep them for {view.knowledge.get('payload')}")
        released = at_weights(view.model, view.weights).eval() if self.test != "gradient_alignment" else None
        scores = []
        batches = -(-len(view.candidates) // self.batch_size)
        with phase(f"membership: {self.test} of {len(view.candidates)} candidates", total=batches,
                   unit="batch") as bar:
            for start in range(0, len(view.candidates), self.batch_size):
                x = view.candidates[start:start + self.batch_size]
                y = view.labels[start:start + self.batch_size].long()
                if released is None:
                    scores.append(self._alignment(view, x, y))
                elif self.test == "loss":
                    scores.append(-record_losses(released, x, y))
                else:
                    scores.append(record_losses(view.model, x, y) - record_losses(released, x, y))
                bar.update(1)
        out = torch.cat(scores).double().cpu()
        return MembershipScores(scores=out, candidates=list(range(len(out))),
                                info={"test": self.test, "candidates": len(out)})

    @staticmethod
    def _alignment(view: MembershipView, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Cosine of each record's gradient at the base with the message's descent direction (visible tensors only)."""
        assert view.base is not None
        model = view.model.eval()
        params = {n: p.detach() for n, p in model.named_parameters()}
        direction = view.gradient or {n: view.base[n] - w for n, w in view.weights.items() if n in view.base}
        names = [n for n in direction if n in params]
        if not names:
            raise AttackNotApplicableError("the message carries none of the model's parameters")
        buffers = {n: b for n, b in model.named_buffers()}

        def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            out = functional_call(model, ({**params, **p}, buffers), (xi.unsqueeze(0),))
            return F.cross_entropy(out, yi.unsqueeze(0))

        per_record = vmap(grad(loss), in_dims=(None, 0, 0))({n: params[n] for n in names}, x, y)
        flat = torch.cat([per_record[n].flatten(1) for n in names], 1).double()
        d = torch.cat([direction[n].flatten().to(flat) for n in names])
        return (flat @ d) / (flat.norm(dim=1) * d.norm()).clamp_min(1e-30)


def record_losses(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Each record's cross-entropy under ``model`` (in eval mode, no gradients), as float64."""
    model.eval()
    with torch.no_grad():
        return F.cross_entropy(model(x), y, reduction="none").double()
