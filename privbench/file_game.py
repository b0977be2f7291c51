"""A recorded message attacked as the audit attacks one: a game over a one-message store (the message as client 0's,
its base as what client 0 received), staged by the game registered for the attack's view and scored by the audit's
scorer (``python -m privbench.attack``)."""
from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from privbench.file_message import Recorded
from privbench.payloads import PayloadStore


def _stats(values: tuple[float, ...]) -> str:
    return "/".join(f"{v:.3f}" for v in values)


@dataclass
class FileSetting:
    """What a game needs of a file attack: the config, the attack, the message's kind as the payload choice, its
    sender as the victim (client 0, round 0, ``--batch-size`` images) and the seed."""

    cfg: Any
    attack: Any
    choice: Any
    victim: Any
    seed: int


def _one_message_store(folder: Path, message: Recorded) -> PayloadStore:
    """The message as client 0's of round 0 and its base as what client 0 received, in a store of their own."""
    store = PayloadStore(folder)
    base = message.base
    if base is not None:
        base = replace(base, round=0, sender="server", receiver="client0")
        store.add(base, keep=True)
    store.add(replace(message.payload, round=0, sender="client0", receiver="server",
                      base=base.id if base is not None else None), keep=True)
    store.flush()
    return store


def play_file(args: argparse.Namespace, p: Any, out: Path, chance: dict[str, Any]) -> dict[str, Any]:
    """The audit's game over a one-message store: the view the attack asks for, staged by the game registered for it,
    attacked, and scored against the truth by the audit's scorer; progress to the terminal and ``run.log``."""
    from privbench.audit.attack_phase import score_play
    from privbench.audit.games import game_for
    from privbench.io import atomic_write_text
    from privbench.payloads.select import PayloadChoice
    from privbench.progress import console_log, run_log
    from privbench.provenance import versions
    from privbench.victim import Victim

    cfg, attack, message, data, model = p.cfg, p.attack, p.message, p.data, p.model
    mean, std = data.train.mean, data.train.std
    inputs = (f"normalised with data={cfg.data.get('source', '')}'s mean {_stats(mean)} and std {_stats(std)}"
              if args.inputs == "normalised" else "raw pixels in [0, 1] (--inputs raw)")
    if args.inputs == "raw":
        # the attack searches in the normalised space either way (a well-scaled start); a raw-pixel model sees
        # its candidates de-normalised, so the message is matched on the inputs the client really used
        shift = torch.tensor(mean).view(1, -1, 1, 1)
        scale = torch.tensor(std).view(1, -1, 1, 1)
        model.register_forward_pre_hook(
            lambda _module, given: (given[0] * scale.to(given[0].device) + shift.to(given[0].device), *given[1:]))
    setting = FileSetting(cfg, attack, PayloadChoice(kind=message.payload.kind),
                          Victim(client=0, round=0, num_images=args.batch_size), int(cfg.seed))
    with run_log(out), console_log(), tempfile.TemporaryDirectory() as scratch:
        store = _one_message_store(Path(scratch), message)
        play, = game_for(attack.view).stage(setting, store, model, data, [0])
        knowledge = play.view.knowledge  # the gradient view's, shared by a label view built on it
        knowledge["input_normalisation"] = {"inputs": args.inputs, **({"mean": list(mean), "std": list(std)}
                                                                      if args.inputs == "normalised" else {})}
        finding = attack.attack(play.view, seed=setting.seed)
        if p.truth is not None:
            images, labels = p.truth
            play.answer.update(images=images, labels=(labels if labels is not None else
                                                      torch.full((len(images),), -1)).long(),
                               non_members=p.pool, non_member_labels=p.pool_labels)
        privacy = score_play(setting, play, finding, data, out)
        if p.truth is not None:
            privacy.update(chance)
        atomic_write_text(out / "config.yaml", OmegaConf.to_yaml(cfg))
    run = {"name": "attack-file", "source": str(args.file), "payload": message.payload.kind,
           "attack": attack.name, "model": str(cfg.model._target_), "data": str(cfg.data.get("source", "")),
           "seed": int(cfg.seed), "num_images": args.batch_size, "inputs": inputs, "versions": versions()}
    return {"run": run, "privacy": privacy, "threat_model": dict(knowledge)}
