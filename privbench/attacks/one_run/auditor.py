"""The auditor's side of a one-run DP audit (Steinke, Nasr and Jagielski, 2023): white-box Dirac gradient canaries,
or input-space canaries (mislabelled images).

Each canary's gradient is a Dirac on its own coordinate (clipped to ``C``), so an included canary moves that
coordinate of the uploaded model by ``-lr C / B`` each step it is sampled in, and an excluded one leaves only the noise and the
real data's gradient there; a coordinate the upload does not carry scores 0. The score is the coordinate's descent, ``-(theta_after - theta_before)``; the
``guesses`` highest are guessed in, the ``guesses`` lowest out. The evaluator turns the right guesses into a lower
bound on epsilon (``metrics.one_run``).

An input-space canary is an image of the population (the test split) with a wrong label, added to the client's
data; its score is the uploaded model's logit of that label, ``log(p / (1 - p))``: a record trained on is fitted,
and a wrong label is one nothing else teaches. (Its change from the download's is no better a score here: LeNet's
initialisation is confident and image-specific, which swamps the change; AUC 0.50 against 0.62 after 20 local
epochs, seed 0.) It needs no access to the mechanism's internals, so it audits any trainer, a non-private one
included (whose claim is no bound at all).
"""
from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

import torch
import torch.nn.functional as F

from privbench.attacks.base import Attack
from privbench.attacks.one_run.findings import CanaryScores
from privbench.attacks.one_run.views import CanaryView
from privbench.attacks.views import at_weights
from privbench.payloads.kinds import Carries
from privbench.schema import Number, Probability

#: Which canaries the auditor designs: gradient Diracs (white-box, DP-SGD's own records) or mislabelled images.
CanaryKind = Literal["dirac", "mislabelled"]
CANARY_KINDS = ("dirac", "mislabelled")


class OneRunAudit(Attack[CanaryView, CanaryScores]):
    """Score each canary from the victim's update and guess ``guesses`` in and ``guesses`` out.

    Args:
        canaries: how many canaries the auditor designs (each included with probability 1/2).
        guesses: how many it guesses each way (at most half the canaries).
        confidence: the confidence of the epsilon lower bound.
        kind: ``dirac`` (gradient canaries inside DP-SGD) or ``mislabelled`` (test-split images with wrong labels
            among the client's records; FedAvg-style updates).
    """

    name: ClassVar[str] = "one_run"
    reads: ClassVar[frozenset[Carries]] = frozenset({"model"})
    view = "canaries"

    def __init__(self, *, canaries: Annotated[int, Number(integer=True, low=2, high=10**7)] = 10000,
                 guesses: Annotated[int, Number(integer=True, low=1, high=10**7)] = 100,
                 confidence: Probability = 0.95,
                 kind: CanaryKind = "dirac") -> None:
        if canaries < 2 or not 1 <= guesses <= canaries // 2:
            raise ValueError("attack.canaries must be >= 2 and attack.guesses in [1, canaries / 2]")
        if not 0 < confidence < 1:
            raise ValueError("attack.confidence must be in (0, 1)")
        if kind not in CANARY_KINDS:
            raise ValueError(f"attack.kind={kind!r} is not one of {', '.join(CANARY_KINDS)}")
        self.canaries, self.guesses, self.confidence, self.kind = canaries, guesses, confidence, kind

    def attack(self, view: Any, *, seed: int) -> CanaryScores:
        """One score per canary: the descent of its coordinate in the victim's update (0 for a coordinate the upload
        does not carry: a learnGene layer the client did not send), or a mislabelled canary's logit of its label."""
        if view.images is not None:
            scores, test = _label_logit(view), "mislabelled_canaries"
        else:
            scores = torch.tensor([-float(view.change[name].flatten()[index]) if name in view.change else 0.0
                                   for name, index in view.coordinates])
            test = "dirac_canaries"
        return CanaryScores(info={"test": test, "confidence": self.confidence}, scores=scores,
                            candidates=list(range(len(scores))), guesses=self.guesses)


def _label_logit(view: Any) -> torch.Tensor:
    """Each mislabelled canary's logit of its label on the uploaded model, ``log(p / (1 - p))`` (LiRA's scale)."""
    received = view.model.eval()
    state = received.state_dict()
    uploaded = at_weights(received, {n: state[n] + d.to(state[n]) for n, d in view.change.items()}).eval()
    with torch.no_grad():
        logp = F.log_softmax(uploaded(view.images), 1).double()
    rows = torch.arange(len(logp), device=logp.device)
    own = logp[rows, view.labels]
    rest = logp.clone()
    rest[rows, view.labels] = -math.inf
    return (own - torch.logsumexp(rest, 1)).cpu()
