"""The round a one-run DP audit instruments: the victim's local DP-SGD rerun with gradient canaries among its records.

Like the active round (``audit/games/active.py``) the federated run stays as it was; the audited round runs again from
the download the victim received, on the same images, with the same local training its update declares, by a
copy of the run's DP-SGD trainer (its planned noise; the copy's releases never reach the run's accounting), with
``attack.canaries`` Dirac gradient canaries (10 C high) on distinct coordinates, each included with probability 1/2
(``privbench/defenses/canaries.py``). The server's view is the uploaded change; which canaries were included is the
evaluator's. The claim the audit tests is the accountant's epsilon for this round's releases: noise multiplier
``sigma``, Poisson rate ``1 / ceil(n / B)`` and the round's steps, at the trainer's delta; beside it the f-DP
bound of those releases on any membership test's TPR (``defenses.tradeoff``).

A GENE-FL learnGene round runs again by GENE-FL's own client code (its Fisher pass and penalty;
``GeneFL.replay_round``) and uploads the layers the recorded learnGene carried, on which its canaries sit.
GENE-FL's own choice would move with the canaries (hundreds of clipped records on a client of a few images steer
its xi scores); the choice is post-processing of the DP-SGD output, so replaying the recorded one leaves the claim
under test as it was. A canary on a layer the upload does not carry scores 0.

Input-space canaries (``attack.kind=mislabelled``) are ``attack.canaries`` test-split images (no client holds them)
with a wrong label drawn uniformly from the other classes; the included ones join the victim's records for its
rerun round (FedAvg-style updates; any trainer, since the audit needs nothing inside the mechanism). The claim is
then that of the round's schedule over the enlarged data.
"""
from __future__ import annotations

import copy
from collections.abc import Collection
from typing import Any

import numpy as np
import torch
from torch import nn

from privbench.attacks.base import Attack
from privbench.attacks.one_run.findings import CanaryScores
from privbench.attacks.one_run.views import CanaryView
from privbench.attacks.views import at_weights
from privbench.audit.games import Game, Play, messages, register_game, register_summary
from privbench.audit.games.membership import score_membership
from privbench.audit.games.one_run_claim import BOUND_FPRS, fdp_bound, round_claim
from privbench.audit.plan import Plan
from privbench.audit.score import Scoring, Truth, register_scorer
from privbench.data import FederatedData
from privbench.data.dataset import ImageDataset
from privbench.defenses.canaries import GradientCanaries
from privbench.defenses.dpsgd import DPSGD
from privbench.errors import AttackNotApplicableError, ConfigError
from privbench.figures import (
    CANARY_TPR_BOUND_01,
    CANARY_TPR_BOUND_1,
    EPSILON_CLAIMED,
    EPSILON_LOWER,
    EPSILON_LOWER_FDP,
    EPSILON_TIGHT,
    MIA_TPR_01,
    MIA_TPR_1,
    formatted,
)
from privbench.fl.protocols.client import replay_inputs
from privbench.fl.sgd import parameters_of
from privbench.fl.trainer import Trainer
from privbench.metrics.one_run import epsilon_lower_bound
from privbench.payloads import LocalTraining, Payload, PayloadStore

#: A canary's gradient is this many clip norms high: a working clip brings it to C; broken clipping lets it through.
CANARY_SCALE = 10.0


def canary_coordinates(model: nn.Module, count: int, *, generator: torch.Generator,
                       within: Collection[str] | None = None) -> list[tuple[str, int]]:
    """``count`` distinct coordinates drawn uniformly over the model's trainable parameters (those named in
    ``within``, when given)."""
    params = [(n, p.numel()) for n, p in model.named_parameters()
              if p.requires_grad and (within is None or n in within)]
    total = sum(size for _, size in params)
    if count > total:
        raise AttackNotApplicableError(f"attack.canaries={count}: the audited parameters have only {total} "
                                       "coordinates")
    flat = torch.randperm(total, generator=generator)[:count].sort().values.tolist()
    out, start, k = [], 0, 0
    for name, size in params:
        while k < len(flat) and flat[k] < start + size:
            out.append((name, flat[k] - start))
            k += 1
        start += size
    order = torch.randperm(count, generator=generator).tolist()
    return [out[i] for i in order]


def canary_round(p: Plan, payload: Payload, base: Payload | None, model: nn.Module, data: FederatedData,
                 indices: list[int]) -> tuple[CanaryView, torch.Tensor]:
    """Rerun the victim's round of ``payload`` with canaries; the server's view and which canaries were in."""
    if getattr(p.attack, "kind", "dirac") == "mislabelled":
        return _mislabelled_round(p, payload, base, model, data, indices)
    trainer = p.protocol.trainer  # the trainer and payload kind were checked before training (audit.plan)
    assert isinstance(trainer, DPSGD)
    device = next(model.parameters()).device
    gene = payload.kind == "learngene"
    if gene:
        if not p.protocol.replays_own_data or base is None or base.tensors is None:
            raise AttackNotApplicableError(f"{payload.id}: a learnGene round needs GENE-FL and the download it "
                                           "started from")
        received, client_data = dict(base.tensors), None
        layers = tuple(payload.condensation.layers) if payload.condensation else None
    else:
        received, _, client_data = replay_inputs(payload, base, data, indices, device=device, what="the audited round")
        layers = None
    count = int(getattr(p.attack, "canaries"))
    generator = torch.Generator().manual_seed(p.seed * 7919 + 43)
    local = at_weights(model, received)
    coordinates = canary_coordinates(local, count, generator=generator, within=set(payload.names) if gene else None)
    included = torch.rand(count, generator=generator) < 0.5
    copied = copy.deepcopy(trainer)
    copied.canaries = GradientCanaries([c for c, keep in zip(coordinates, included.tolist()) if keep],
                                       magnitude=CANARY_SCALE * float(copied.max_grad_norm),
                                       generator=torch.Generator().manual_seed(p.seed * 7919 + 47))
    sent = parameters_of(local)
    replay = p.protocol.replay_round(copied, local, data, recorded=payload, images=client_data,
                                     generator=torch.Generator().manual_seed(p.seed * 1_000_003 + 73), seed=p.seed,
                                     victim=p.victim, base_id=str(payload.base), layers=layers)
    message, record = replay.message, replay.training
    assert message.tensors is not None
    if gene:  # the layers the learnGene carried
        change = {n: t - sent[n] for n, t in message.tensors.items() if n in sent and t.is_floating_point()}
    else:
        change = {n: message.tensors[n] - sent[n] for n in sent if sent[n].is_floating_point()}
    extra: dict[str, Any] = {}
    if gene:
        seen = sum(c in change for c, _ in coordinates)
        extra = {"uploaded_layers": list(message.condensation.layers) if message.condensation else message.names,
                 "layer_choice": "the recorded learnGene's (replayed)" if layers else "GENE-FL's on the rerun",
                 "canaries_on_uploaded_layers": seen}
    knowledge = _knowledge(p, payload, copied, record, auditor="white-box Dirac gradient canaries",
                           canary_magnitude=f"{CANARY_SCALE:g} C (clipped to C by a working mechanism)",
                           canaries_sampled=copied.canaries.sampled, **extra)
    return CanaryView(change, coordinates, knowledge), included


def _mislabelled_round(p: Plan, payload: Payload, base: Payload | None, model: nn.Module, data: FederatedData,
                       indices: list[int]) -> tuple[CanaryView, torch.Tensor]:
    """The victim's round rerun with mislabelled test-split images among its records (``attack.kind=mislabelled``)."""
    device = next(model.parameters()).device  # the payload kind and canary count were checked before training
    received, _, client_data = replay_inputs(payload, base, data, indices, device=device, what="the audited round")
    count = int(getattr(p.attack, "canaries"))
    generator = torch.Generator().manual_seed(p.seed * 7919 + 53)
    rows = torch.randperm(len(data.test), generator=generator)[:count]
    canaries = data.test.subset(rows.to(data.test.images.device)).to(device)
    classes = data.train.num_classes
    shift = torch.randint(1, classes, (count,), generator=generator).to(device)
    wrong = (canaries.labels + shift) % classes
    included = torch.rand(count, generator=generator) < 0.5
    keep = included.nonzero().flatten().to(device)
    enlarged = ImageDataset(client_data.name, torch.cat([client_data.images, canaries.images[keep]]),
                            torch.cat([client_data.labels, wrong[keep]]), client_data.num_classes, client_data.mean,
                            client_data.std)
    trainer = copy.deepcopy(p.protocol.trainer)
    local = at_weights(model, received)
    sent = parameters_of(local)
    replay = p.protocol.replay_round(trainer, local, data, recorded=payload, images=enlarged,
                                     generator=torch.Generator().manual_seed(p.seed * 1_000_003 + 79), seed=p.seed,
                                     victim=p.victim, base_id=str(payload.base))
    record, after = replay.training, replay.message.tensors
    assert after is not None
    change = {n: after[n] - sent[n] for n in sent if sent[n].is_floating_point()}
    knowledge = _knowledge(p, payload, trainer, record, auditor="input-space canaries: test-split images with a "
                           "wrong label drawn from the other classes", canaries_included=int(included.sum()),
                           client_records=len(client_data))
    view = CanaryView(change, [], knowledge, model=at_weights(model, received).eval(),
                      images=canaries.normalised(), labels=wrong.long())
    return view, included


def _knowledge(p: Plan, payload: Payload, trainer: Trainer, record: LocalTraining, *, auditor: str,
               **extra: Any) -> dict[str, Any]:
    """An audited round's threat model: the canaries, the round's DP parameters and the claim under test."""
    if isinstance(trainer, DPSGD):
        sigma, delta, accountant = float(trainer.sigma(payload.sender)), float(trainer.delta), trainer.accountant
        claim = f"the accountant's ({accountant}) epsilon for this round's releases"
    else:
        sigma, delta, accountant = 0.0, 0.0, "rdp"
        claim = f"none: the {trainer.name} trainer adds no noise (any epsilon)"
    claimed, rate, bounds = round_claim(record, sigma, delta=delta, accountant=accountant)
    return {"payload": payload.id, "payload_kind": payload.kind,
            "server": "honest-but-curious (the auditor designed the canaries)",
            "auditor": f"one run (Steinke, Nasr and Jagielski 2023), {auditor}",
            "canaries": int(getattr(p.attack, "canaries")), "inclusion_probability": 0.5, **extra,
            "guesses_each_way": int(getattr(p.attack, "guesses")), "sigma": sigma, "sample_rate": rate,
            "steps": record.steps, "delta": delta, "claimed_epsilon": claimed,
            "claim": claim,
            "round_tpr_bounds": dict(zip([f"{a:g}" for a in BOUND_FPRS], bounds)),
            "training": record.hyperparameters()}


@register_game("canaries")
class Canaries(Game):
    """A one-run DP audit: each audited client's round rerun with the auditor's gradient canaries."""

    def check(self, p: Plan, data: FederatedData, model: nn.Module, policy: Any) -> None:
        """The canaries must exist (distinct model coordinates, or test-split images) and the round must be one the
        audit can rerun: Dirac canaries live inside DP-SGD (an update or a learnGene), mislabelled ones in an update."""
        count, kind = int(getattr(p.attack, "canaries")), str(getattr(p.attack, "kind", "dirac"))
        payloads = ("update",) if kind == "mislabelled" else ("update", "learngene")
        if p.choice.kind not in payloads:
            raise ConfigError(f"attack=one_run attack.kind={kind} reruns a client's {' or '.join(payloads)}; "
                              f"payload={p.choice.kind} is not one")
        if kind == "dirac" and p.protocol.trainer.name != "dpsgd":
            raise ConfigError("attack=one_run with Dirac canaries audits DP-SGD's claim: use defense=dpsgd (or "
                              "attack.kind=mislabelled, which audits any trainer)")
        if kind == "mislabelled":
            have, what = len(data.test), "test-split images"
        else:
            have, what = sum(q.numel() for q in model.parameters() if q.requires_grad), "model coordinates"
        if count > have:
            raise ConfigError(f"attack.canaries={count}: there are only {have:,} {what}")

    def stage(self, p: Plan, store: PayloadStore, model: nn.Module, data: FederatedData, clients: list[int]
              ) -> list[Play]:
        from privbench.progress import phase

        plays = []
        with phase(f"one-run audit: the victim's round rerun with {int(getattr(p.attack, 'canaries'))} canaries",
                   total=len(clients), unit="round") as bar:
            for payload, base, records in messages(p, store, clients):
                view, included = canary_round(p, payload, base, model, data, records)
                plays.append(Play(payload, view, records, {"membership": included}))
                bar.update(1)
        return plays


@register_scorer(CanaryScores)
def score_canaries(finding: CanaryScores, view: Any, attack: Attack, truth: Truth, how: Scoring) -> dict[str, Any]:
    """A one-run audit: the membership figures of its canary scores, and its guesses (the ``guesses`` highest in,
    the lowest out) turned into a lower bound on epsilon at its confidence, next to the claim it tests."""
    out = score_membership(finding, view, attack, truth, how)
    assert truth.membership is not None
    members = truth.membership.numpy().astype(bool)
    order = np.argsort(-finding.scores.numpy(), kind="stable")
    k = finding.guesses
    right = int(members[order[:k]].sum() + (~members[order[len(order) - k:]]).sum())
    knowledge = getattr(view, "knowledge", {})
    confidence = float(finding.info.get("confidence", 0.95))
    bound = epsilon_lower_bound(len(members), 2 * k, right, delta=float(knowledge.get("delta", 0.0)),
                                confidence=confidence)
    bounds = knowledge.get("round_tpr_bounds", {})
    out.update(fdp_bound(knowledge, len(members), 2 * k, right, confidence=confidence))
    out.update({EPSILON_LOWER.key: bound, EPSILON_CLAIMED.key: knowledge.get("claimed_epsilon"),
                CANARY_TPR_BOUND_1.key: bounds.get("0.01"), CANARY_TPR_BOUND_01.key: bounds.get("0.001"),
                "canary_guesses": 2 * k, "canary_guesses_right": right, "canaries": len(members),
                "epsilon_lower_bound_confidence": confidence})
    return out


@register_summary(30)
def audit_lines(privacy: dict[str, Any], threat: dict[str, Any]) -> list[tuple[str, str]]:
    """A one-run DP audit: its bounds beside the claims."""
    lines: list[tuple[str, str]] = []
    if EPSILON_LOWER.key in privacy:
        lines.append(("audit", f"one-run epsilon >= {EPSILON_LOWER.shown(privacy)} at "
                               f"{formatted(100 * privacy.get('epsilon_lower_bound_confidence', 0.95), '{:.0f}')} % "
                               f"({privacy.get('canary_guesses_right')} of {privacy.get('canary_guesses')} guesses "
                               f"right, {privacy.get('canaries')} canaries), claimed "
                               f"{EPSILON_CLAIMED.shown(privacy)} for the round"))
        if privacy.get(EPSILON_LOWER_FDP.key) is not None:
            lines.append(("", f"through f-DP ({privacy.get('fdp_family')}): epsilon >= "
                              f"{EPSILON_LOWER_FDP.shown(privacy)}, against the round's tight "
                              f"{EPSILON_TIGHT.shown(privacy)}"))
        if privacy.get(CANARY_TPR_BOUND_1.key) is not None:
            lines.append(("", f"the round's f-DP bound on a canary test: TPR at most "
                              f"{CANARY_TPR_BOUND_1.shown(privacy)} at FPR 1 %, "
                              f"{CANARY_TPR_BOUND_01.shown(privacy)} at 0.1 % (measured "
                              f"{MIA_TPR_1.shown(privacy)} and "
                              f"{MIA_TPR_01.shown(privacy)})"))
    return lines
