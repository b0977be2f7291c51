"""An active server's round through secure aggregation: it crafts the cohort's downloads, reads only their sum.

As Fowl et al. do, the server may send every member the same crafted download and read the crafted rows from the
aggregate of the whole cohort. A server that aims at one member isolates it (``attacks.active.isolation``): with
``downloads=inconsistent`` the victim alone gets the crafted download and every other member a quiet one (the
crafted rows zeroed), and the server undoes its own downloads' weighted mean with the victim's share estimated from
the sum; with ``sybils`` it controls that many members, which upload what they received. Every member's round runs
again on what it received (each on its own images with its declared training, GENE-FL's by its own client code),
every member checks its own download, and the updates go through the run's own secure aggregation.
"""
from __future__ import annotations

import copy
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from privbench.attacks.active.base import ActiveAttack
from privbench.attacks.active.isolation import victim_share, within_noise
from privbench.attacks.active.views import ActiveView
from privbench.audit.plan import Plan
from privbench.data import FederatedData
from privbench.defenses.secure_aggregation.exchange import digest
from privbench.errors import AttackNotApplicableError
from privbench.figures import CRAFTED_UPLOADED, DOWNLOAD_FLAGGED
from privbench.fl.protocols.client import replay_inputs
from privbench.fl.protocols.round import Upload
from privbench.fl.sgd import parameters_of
from privbench.fl.trainer import SGDTrainer, Trainer
from privbench.fl.wire import Wire
from privbench.payloads import CapturePolicy, LocalTraining, Payload, PayloadStore

#: A member of the victim's cohort: its name, the train images its upload was computed from, its declared training.
Member = tuple[str, list[int], LocalTraining]


def _nbytes(state: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def change_from(tensors: dict[str, torch.Tensor], sent: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A model reply as the server reads it: each floating tensor's change from the crafted download."""
    return {n: t - sent[n] for n, t in tensors.items() if n in sent and t.is_floating_point()}


def secure_round(p: Plan, payload: Payload, base: Payload | None, data: FederatedData, members: Sequence[Member],
                 crafted: nn.Module, check: Any, knowledge: Any, what_was_sent: str) -> ActiveView:
    """The cohort's round on ``crafted`` (and, isolating, the quiet download), through the run's secure
    aggregation: the server's view is the aggregate's change from what it sent. ``check(model, sent, images)`` is
    a member's check of its download; ``knowledge(**facts)`` the threat model."""
    attack = p.attack
    assert isinstance(attack, ActiveAttack)
    isolation, victim = attack.isolation, f"client{p.victim.client}"
    names = _cohort(payload, members, victim, isolation.isolates, isolation.sybils)
    received = dict(base.tensors) if base is not None and base.tensors is not None else {}
    sent, layer, rows = parameters_of(crafted), attack.crafted_layer(crafted), attack.crafted_rows(crafted)
    hushed = attack.quiet(crafted) if isolation.downloads == "inconsistent" else crafted
    sent_quiet = parameters_of(hushed)
    own = attack.member_downloads(crafted, len(members))  # per-client downloads (LOKI), else crafted or quiet
    sybils = [n for n in names if n != victim][: isolation.sybils]
    uploads, records, checks = [], [], []
    own_check: dict[str, Any] = {}
    for i, member in enumerate(members):  # ``hushed`` is ``crafted`` itself unless the downloads differ
        download = own[i] if own is not None else crafted if member[0] == victim else hushed
        upload, record, verdict = _member_round(p, payload, base, data, i, member, download, received, check,
                                                sybil=member[0] in sybils)
        uploads.append(upload)
        records += [record] if record is not None else []
        checks += [verdict] if verdict is not None else []
        own_check = verdict if member[0] == victim and verdict is not None else own_check
    aggregation = p.protocol.aggregation
    agreed: dict[str, Any] = ({"received": _digests(members, own, crafted, hushed, victim, sybils)}
                              if getattr(aggregation, "agreed_download", False) else {})
    with tempfile.TemporaryDirectory() as scratch:
        wire = Wire(PayloadStore(Path(scratch)), CapturePolicy(kinds=frozenset()), sends=aggregation.sends,
                    trainer=fresh_trainer(p))
        mean = aggregation.combine(sent, uploads, round_=payload.round, group=payload.cluster, wire=wire, seed=p.seed,
                                   **agreed)
        cost = wire.totals().uplink_bytes
    abandoned = list(getattr(aggregation, "abandoned", [])) if agreed else []  # then the server reads nothing
    observed, extra = ({}, {}) if abandoned else _server_read(p, mean, sent, sent_quiet, uploads, sybils, layer, rows,
                                                              victim)
    extra = {"downloads": _downloads(isolation.downloads, victim, names, sent, sent_quiet, own), "sybils": sybils,
             **extra, **({"abandoned_by": abandoned} if agreed else {})}
    word = "learnGenes" if "learngene" in p.protocol.sends else "updates"
    to = (f"sent to {victim} only (the {len(members) - 1} others: {attack.quieted})"
          if isolation.downloads == "inconsistent" else
          f"each of the {len(members)} members its own" if own is not None
          else f"sent to all {len(members)} members of the cohort")
    threat = knowledge(crafted=f"{what_was_sent}, {to}", reply_bytes=cost, training=payload.training,
                       reply=f"the cohort's {aggregation.name} aggregate of {len(members)} {word} "
                             f"({sum(r.num_samples for r in records)} images"
                             f"{f'; {len(sybils)} sybil members the server controls' if sybils else ''}), each "
                             "trained as usual on its download", **extra)
    flagged = [c for c in checks if c[DOWNLOAD_FLAGGED.key]]  # a member that halts would stop the round
    shown = own_check if isolation.isolates else (flagged or checks or [{}])[0]  # isolating: the victim's own
    verdict = {DOWNLOAD_FLAGGED.key: 0.0, "download_check": [], **shown, "members_flagging": len(flagged)}
    if CRAFTED_UPLOADED.key in extra:
        verdict[CRAFTED_UPLOADED.key] = float(extra[CRAFTED_UPLOADED.key])
    target = next(indices for name, indices, _ in members if name == victim) if isolation.isolates else None
    if own is not None:  # the truth is every member's images, each with its member
        target = [i for _, indices, _ in members for i in indices]
    owners = [name for name, indices, _ in members for _ in indices] if own is not None else None
    return ActiveView(sent, observed, "update", payload.training, data.train.shape, tuple(data.train.mean),
                      tuple(data.train.std), layer, threat, verdict, target, owners)


def _digests(members: Sequence[Member], own: Sequence[nn.Module] | None, crafted: nn.Module, hushed: nn.Module,
             victim: str, sybils: Sequence[str]) -> dict[str, bytes]:
    """What each member says it received (``aggregation.agreed_download``): the digest of its download; a sybil, the
    server's own, says it received what the victim did."""
    said = {name: digest(parameters_of(own[i] if own is not None else crafted if name == victim else hushed))
            for i, (name, _, _) in enumerate(members) if name not in sybils}
    victims = said[victim] if victim in said else digest(parameters_of(crafted))  # hashed once, for every sybil
    return {**said, **{name: victims for name in sybils}}


def _cohort(payload: Payload, members: Sequence[Member], victim: str, isolates: bool, sybils: int) -> list[str]:
    """The cohort's member names, refused in one line where the server cannot play it as asked."""
    if not members:
        raise AttackNotApplicableError(f"{payload.id}: no member of the cohort was recorded")
    names = [name for name, _, _ in members]
    if isolates and victim not in names:
        raise AttackNotApplicableError(f"{payload.id}: the server isolates {victim}, who is not in round "
                                       f"{payload.round}'s cohort ({', '.join(names)})")
    if sybils > len(members) - 1:
        raise AttackNotApplicableError(f"attack.sybils={sybils}: round {payload.round}'s cohort has "
                                       f"{len(members)} members, so at most {len(members) - 1} besides the victim")
    return names


def _member_round(p: Plan, payload: Payload, base: Payload | None, data: FederatedData, i: int, member: Member,
                  own: nn.Module, received: dict[str, torch.Tensor], check: Any, *,
                  sybil: bool) -> tuple[Upload, LocalTraining | None, dict[str, Any] | None]:
    """One member's upload of its round on the download ``own`` it received, its training and its check of that
    download (a sybil, the server's own client, uploads what it received and checks nothing)."""
    name, indices, declared = member
    own_sent = parameters_of(own)
    if sybil:
        message = Payload.from_tensors(kind="update", round=payload.round, sender=name, receiver="server",
                                       tensors=dict(own_sent), base=f"{payload.base}-crafted", training=declared)
        return Upload(declared.num_samples, message, sorted({n.rsplit(".", 1)[0] for n in own_sent})), None, None
    stand_in = Payload.from_tensors(kind="update", round=payload.round, sender=name, receiver="server",
                                    tensors={}, base=payload.base, cluster=payload.cluster, training=declared)
    images, verdict = None, None
    if not p.protocol.replays_own_data:  # else its own client code draws its images (GENE-FL's, and its layers)
        device = next(own.parameters()).device
        _, _, images = replay_inputs(stand_in, base, data, indices, device=device, what="an active round")
        verdict = check(own, own_sent, received, images.normalised())
    generator = torch.Generator().manual_seed(p.seed * 1_000_003 + 71 + i)
    replay = p.protocol.replay_round(fresh_trainer(p), own, data, recorded=stand_in, images=images,
                                     generator=generator, seed=p.seed, victim=p.victim,
                                     base_id=f"{payload.base}-crafted", transform=p.transform)
    if verdict is None:
        verdict = check(own, own_sent, received, replay.images.normalised())
    return replay.upload, replay.training, verdict


def _server_read(p: Plan, mean: dict[str, torch.Tensor], sent: dict[str, torch.Tensor],
                 sent_quiet: dict[str, torch.Tensor], uploads: Sequence[Upload], sybils: Sequence[str], layer: str,
                 rows: torch.Tensor, victim: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """What the server reads from the aggregate ``mean``: its change from what the victim was sent on the names
    some honest member (not one of ``sybils``) uploaded, the victim's own change on the crafted layer when isolating;
    and the facts of it."""
    attack = p.attack
    assert isinstance(attack, ActiveAttack)
    isolation, honest = attack.isolation, [u for u in uploads if u.payload.sender not in sybils]
    carried = {n for u in honest for n in u.payload.names}  # names no honest member uploaded are the server's own
    observed = {n: t for n, t in change_from(mean, sent).items() if n in carried}
    extra: dict[str, Any] = {}
    if "learngene" in p.protocol.sends:  # each member chose its own layers
        sending_layer = sum(layer in u.layers for u in honest)
        uploaded = any(layer in u.layers for u in honest if u.payload.sender == victim) if isolation.isolates \
            else sending_layer > 0
        extra.update({CRAFTED_UPLOADED.key: uploaded, "members_uploading_crafted_layer": sending_layer})
        if not uploaded:  # the victim kept the layer home: what the others sent of it is not the victim's
            observed = {n: t for n, t in observed.items() if not n.startswith(f"{layer}.")}
    if isolation.downloads == "inconsistent" and f"{layer}.weight" in observed:
        extra["victim_share_estimated"] = undo_quiet(observed, mean, sent, sent_quiet, layer, rows)
    if isolation.isolates and attack.sparse_rows and f"{layer}.weight" in observed:
        extra["crafted_rows_within_noise"] = within_noise(observed, layer, rows)
    return observed, extra


def fresh_trainer(p: Plan) -> Trainer:
    """A copy of the run's trainer (its planned noise and accounting; the copy's releases never reach the run's
    record), or plain SGD under a message transform."""
    if p.transform is not None:
        return SGDTrainer()
    return copy.deepcopy(p.protocol.trainer)


def undo_quiet(observed: dict[str, torch.Tensor], mean: dict[str, torch.Tensor], sent: dict[str, torch.Tensor],
                sent_quiet: dict[str, torch.Tensor], layer: str, rows: torch.Tensor) -> float:
    """Replace the crafted layer's change in ``observed`` by the victim's, scaled back: the aggregate ``mean``
    less the downloads' mean (victim share ``w`` estimated from the unfired crafted rows, on what the crafted
    download adds to the quiet one: ``mean - quiet = w (sent - quiet)`` there), over ``w``."""
    keys = [k for k in (f"{layer}.weight", f"{layer}.bias") if k in mean]
    stack = [torch.cat([(mean[k].double() - sent_quiet[k].double()).reshape(len(mean[k]), -1) for k in keys], 1),
             torch.cat([(sent[k].double() - sent_quiet[k].double()).reshape(len(sent[k]), -1) for k in keys], 1)]
    share = victim_share(stack[0], stack[1], rows)
    if not share > 0:
        raise AttackNotApplicableError(f"the victim's estimated share of the cohort's weight is {share:.3g}: the "
                                       "crafted rows carry nothing of its reply (did it upload them?)")
    for k in keys:
        downloads = share * sent[k].double() + (1 - share) * sent_quiet[k].double()
        observed[k] = ((mean[k].double() - downloads) / share).to(mean[k].dtype)
    return share


def _downloads(mode: str, victim: str, names: Sequence[str], sent: dict[str, torch.Tensor],
               sent_quiet: dict[str, torch.Tensor], own: Sequence[nn.Module] | None) -> dict[str, Any]:
    """Which download went to whom, with each one's bytes (per-client downloads: the tensors they differ in, and
    each member's slot in cohort order)."""
    count = len(names)
    if own is not None:
        states = [parameters_of(m) for m in own]
        differ = sorted(n for n in states[0] if any(not torch.equal(s[n], states[0][n]) for s in states[1:]))
        return {"distinct": count, "each": {"to": f"each of the {count} members", "bytes": _nbytes(states[0])},
                "differ_in": differ, "slots": {name: i for i, name in enumerate(names)}, "victim": victim,
                "bytes_total": sum(_nbytes(s) for s in states)}
    if mode == "same":
        return {"distinct": 1, "crafted": {"to": f"all {count} members", "bytes": _nbytes(sent)}}
    return {"distinct": 2, "crafted": {"to": victim, "bytes": _nbytes(sent)},
            "quiet": {"to": f"the other {count - 1} members", "bytes": _nbytes(sent_quiet)}}
