"""The round an active server crafts: it sends the victim its own download, the victim trains on it as usual.

The federated run stays honest; for the audited round the server (the attack, ``craft``) replaces the download the
victim received, and the victim's round runs again from that download on the same data with the same local
training its recorded reply declares (a one-step gradient, or local SGD epochs), by a fresh copy of the run's own
trainer (DP-SGD included, so its accounting of the real run is untouched) and the wire's message transform. The
attacker gets the crafted download and the reply, never the data. The victim also runs a cautious client's check
of what it received (``defenses.detector``); its verdict is reported, and the victim trains regardless.

Under secure aggregation (``payload=aggregate``) the server crafts the downloads of the victim's whole cohort and
reads the aggregate (``audit.games.active_cohort``, where it may also isolate the victim).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from privbench.attacks.active.base import ActiveAttack
from privbench.attacks.active.loki import Attributed
from privbench.attacks.active.views import ActiveView
from privbench.attacks.views import at_weights
from privbench.audit.games import Game, Play, messages, register_game
from privbench.audit.games.active_cohort import Member, change_from, fresh_trainer, secure_round
from privbench.audit.games.reconstruction import score_reconstructed
from privbench.audit.plan import Plan
from privbench.audit.score import Scoring, Truth, register_scorer
from privbench.data import FederatedData
from privbench.defenses.detector import inspect_download
from privbench.errors import AttackNotApplicableError, ConfigError
from privbench.figures import (
    ATTRIBUTED_FRACTION,
    CRAFTED_UPLOADED,
    DOWNLOAD_FLAGGED,
    MISATTRIBUTED,
    VICTIM_ATTRIBUTED,
)
from privbench.fl.protocols.client import Replay, replay_inputs
from privbench.fl.sgd import parameters_of
from privbench.payloads import LocalTraining, Payload, PayloadStore
from privbench.payloads.encoding import decode
from privbench.pixels import normalise


def _attack(p: Plan) -> ActiveAttack:
    assert isinstance(p.attack, ActiveAttack)
    return p.attack


def _crafted(p: Plan, model: nn.Module, received: dict[str, torch.Tensor], data: FederatedData) -> nn.Module:
    """The attack's crafted download of ``received``, given public test images (model input space)."""
    device = next(model.parameters()).device
    attack = _attack(p)
    rows = torch.randperm(len(data.test), generator=torch.Generator().manual_seed(p.seed * 7919 + 31))
    rows = rows[: attack.public].to(data.test.images.device)
    public = normalise(data.test.images[rows].cpu().float() / 255.0, data.train.mean, data.train.std)
    crafted = attack.craft(at_weights(model, received), public.to(device), seed=p.seed,
                           mean=tuple(data.train.mean), std=tuple(data.train.std))
    return crafted.to(device)


def _knowledge(p: Plan, payload: Payload, *, crafted: str, reply: str, reply_bytes: int,
               training: LocalTraining | None, **extra: Any) -> dict[str, Any]:
    """The threat model of an active round: the attack's settings, what it sent and what came back."""
    describe = _attack(p).describe()
    return {"payload": payload.id, "payload_kind": payload.kind, **describe, "crafted_download": crafted,
            "reply": reply, **extra, "reply_bytes": reply_bytes,
            "training": training.hyperparameters() if training is not None else None, "labels": "not given"}


def _what_was_sent(p: Plan, payload: Payload, crafted: nn.Module) -> str:
    """The crafted download in words: the model behind a crafted block, or with crafted weights in one layer."""
    attack = _attack(p)
    elements = sum(t.numel() for t in parameters_of(crafted).values())
    if attack.describe().get("changed") == "weights":
        return f"{payload.base} with crafted weights in {attack.crafted_layer(crafted)} ({elements:,} elements)"
    return f"{payload.base} behind the crafted block ({elements:,} elements)"


def _client_check(crafted: nn.Module, sent: dict[str, torch.Tensor], received: dict[str, torch.Tensor],
                  local: torch.Tensor) -> dict[str, Any]:
    """The victim's own check of the crafted download (``sent``, its state) against the architecture it expected
    (``received``) and on its own inputs ``local``."""
    verdict = inspect_download(sent, {n: list(t.shape) for n, t in received.items()}, model=crafted, local=local)
    return {DOWNLOAD_FLAGGED.key: float(verdict.flagged), "download_check": verdict.reasons}


def active_round(p: Plan, payload: Payload, base: Payload | None, model: nn.Module, data: FederatedData,
                 indices: list[int], members: Sequence[Member] = ()) -> ActiveView:
    """Craft the victim's download of ``payload``'s round, rerun its round on it, and return the server's view.

    ``indices`` are the train images the recorded reply was computed from (the evaluator's truth): the victim
    trains on them again, as it did, but from the crafted download. A secure ``aggregate`` reruns every one of
    ``members`` and aggregates their updates securely.
    """
    if payload.kind == "aggregate":
        received = dict(base.tensors) if base is not None and base.tensors is not None else {}
        crafted = _crafted(p, model, received, data)
        return secure_round(p, payload, base, data, members, crafted, check=_client_check,
                            knowledge=functools.partial(_knowledge, p, payload),
                            what_was_sent=_what_was_sent(p, payload, crafted))
    if payload.kind == "learngene":
        return _gene_round(p, payload, base, model, data)
    if payload.kind not in ("gradient", "update"):
        raise AttackNotApplicableError(f"attack={p.attack.name} crafts the download of a gradient, an update or a "
                                       f"learnGene round; {payload.kind} is not one")
    device = next(model.parameters()).device
    received, training, client_data = replay_inputs(payload, base, data, indices, device=device,
                                                    what="an active round")
    crafted = _crafted(p, model, received, data)
    sent = parameters_of(crafted)
    check = _client_check(crafted, sent, received, client_data.normalised())
    trainer, name = fresh_trainer(p), payload.sender
    generator = torch.Generator().manual_seed(p.seed * 1_000_003 + 71)
    if payload.kind == "gradient":
        x, y = client_data.normalised(), client_data.labels
        reply, record = trainer.gradient(crafted, x, y, client=name, lr=training.lr, generator=generator)
        message = Payload.from_tensors(kind=payload.kind, round=payload.round, sender=name, receiver="server",
                                       tensors=reply, base=f"{payload.base}-crafted", training=record)
        if p.transform is not None:
            message = decode(p.transform.protect(message, None), sent)
    else:
        replay = p.protocol.replay_round(trainer, crafted, data, recorded=payload, images=client_data,
                                         generator=generator, seed=p.seed, victim=p.victim,
                                         base_id=f"{payload.base}-crafted", transform=p.transform)
        message, record = replay.message, replay.training
    assert message.tensors is not None
    observed = dict(message.tensors) if payload.kind == "gradient" else change_from(message.tensors, sent)
    knowledge = _knowledge(
        p, payload, crafted=_what_was_sent(p, payload, crafted),
        reply=f"the victim's {payload.kind}, trained as usual on the crafted download ({record.steps} step(s), batch "
              f"{record.batch_size}, {record.num_samples} samples)", reply_bytes=message.nbytes, training=record)
    return ActiveView(sent, observed, payload.kind, record, data.train.shape, tuple(data.train.mean),
                      tuple(data.train.std), _attack(p).crafted_layer(crafted), knowledge, check)


def _gene_client(p: Plan, crafted: nn.Module, sent: dict[str, torch.Tensor], received: dict[str, torch.Tensor],
                 data: FederatedData, *, recorded: Payload) -> tuple[Replay, dict[str, Any]]:
    """``recorded``'s client's round on the crafted download by its own client code (``replay_round``: GENE-FL's
    Fisher pass, penalty, xi and layer choice over the crafted model's layers), and its check of the download."""
    try:
        replay = p.protocol.replay_round(fresh_trainer(p), crafted, data, recorded=recorded, images=None,
                                         generator=torch.Generator(), seed=p.seed, victim=p.victim,
                                         base_id=f"{recorded.base}-crafted", transform=p.transform)
    except ConfigError as refused:  # the client's stability check, on the server's model rather than the run's
        raise ConfigError(f"on the server's crafted download (the honest rounds trained): {refused}") from refused
    return replay, _client_check(crafted, sent, received, replay.images.normalised())


def _gene_round(p: Plan, payload: Payload, base: Payload | None, model: nn.Module, data: FederatedData) -> ActiveView:
    """The victim's GENE-FL round on the crafted download (``_gene_client``): the server reads what it uploads."""
    gene = getattr(p.protocol, "gene", None)  # the protocol's learnGene settings, as built
    if not p.protocol.replays_own_data or base is None or base.tensors is None:
        raise AttackNotApplicableError(f"{payload.id}: a learnGene round needs GENE-FL and the download it "
                                       "started from")
    crafted = _crafted(p, model, dict(base.tensors), data)
    sent = parameters_of(crafted)
    replay, check = _gene_client(p, crafted, sent, dict(base.tensors), data, recorded=payload)
    upload, training = replay.message, replay.training
    assert upload.tensors is not None
    chosen = list(upload.condensation.layers) if upload.condensation else []
    layer = _attack(p).crafted_layer(crafted)
    uploaded = layer in chosen
    xi = upload.condensation.xi if upload.condensation else {}
    knowledge = _knowledge(
        p, payload, crafted=_what_was_sent(p, payload, crafted),
        reply=f"the victim's learnGene, its layers chosen by GENE-FL on the crafted download "
              f"(select={getattr(gene, 'select', '-')}, score={getattr(gene, 'score', '-')}): {', '.join(chosen)}",
        reply_bytes=upload.nbytes, training=training,
        **{CRAFTED_UPLOADED.key: uploaded, "crafted_layer_xi": xi.get(layer)})
    check = {**check, CRAFTED_UPLOADED.key: float(uploaded)}
    return ActiveView(sent, change_from(upload.tensors, sent), "learngene", training, data.train.shape,
                      tuple(data.train.mean), tuple(data.train.std), layer, knowledge, check)


@register_scorer(Attributed)
def score_attributed(finding: Attributed, view: Any, attack: Any, truth: Truth, how: Scoring) -> dict[str, Any]:
    """Images matched against the cohort's (``score_reconstructed``), and whether each image recovered was read
    from the slot of the member that holds it (``view.owners``)."""
    privacy = score_reconstructed(finding, view, attack, truth, how)
    owners = getattr(view, "owners", None)
    if owners is None:
        return privacy
    recovered = [row for row in privacy.get("matched", []) if how.recovered.count([row])]  # none: nothing was read
    right = [row for row in recovered if finding.sources[row["recon"]] == owners[row["truth"]]]
    privacy.update({ATTRIBUTED_FRACTION.key: len(right) / len(owners), MISATTRIBUTED.key: len(recovered) - len(right)})
    victim = view.knowledge.get("downloads", {}).get("victim")
    if victim in owners:  # the audited member's own share, as an isolating server reports it
        privacy[VICTIM_ATTRIBUTED.key] = sum(owners[r["truth"]] == victim for r in right) / owners.count(victim)
    return privacy


def _members(store: PayloadStore, aggregate: Payload) -> list[tuple[str, list[int], LocalTraining]]:
    """Each member of a secure aggregate's cohort: its name, its images (the evaluator's truth), its declared training."""
    return [(rec["sender"], store.truth(rec["id"]), LocalTraining.from_dict(rec["training"]))
            for rec in store.records(kind="masked_upload", round=aggregate.round, cluster=aggregate.cluster)]


@register_game("active")
class Active(Game):
    """The server crafts each audited client's download and the client's round runs on it (its cohort's, through
    secure aggregation); the truth is the images of the member the server isolated, else the client's."""

    photographs = True

    def stage(self, p: Plan, store: PayloadStore, model: nn.Module, data: FederatedData, clients: list[int]
              ) -> list[Play]:
        plays = []
        for payload, base, records in messages(p, store, clients):
            view = active_round(p, payload, base, model, data, records,
                                _members(store, payload) if payload.kind == "aggregate" else ())
            plays.append(Play(payload, view, list(view.target) if view.target is not None else records))
        return plays
