"""A recorded message attacked as the audit attacks one (``python -m privbench.attack``): the play of one message by
the game registered for the attack's view (``Game.play``: the message and its base as recorded, ids kept), scored by
the audit's scorer."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf


def _stats(values: tuple[float, ...]) -> str:
    return "/".join(f"{v:.3f}" for v in values)


@dataclass
class DeclaredImages:
    """A file attack's payload choice: the images to rebuild are the ``--batch-size`` declared, whatever the
    message's training record says (the memory and truth checks were sized by it)."""

    batch_size: int

    def images(self, payload: Any, victim: Any, *, unroll: bool = False) -> int:
        return self.batch_size


@dataclass
class FileSetting:
    """What a game's play of one message needs of a file attack: the config, the attack, the images to rebuild
    (``DeclaredImages``) and the seed."""

    cfg: Any
    attack: Any
    choice: DeclaredImages
    seed: int


def play_file(args: argparse.Namespace, p: Any, out: Path, chance: dict[str, Any]) -> dict[str, Any]:
    """The audit's play of one message: the view the attack asks for, built by the game registered for it, attacked,
    and scored against the truth by the audit's scorer; progress to the terminal and ``run.log``."""
    from privbench.audit.attack_phase import score_play
    from privbench.audit.games import game_for
    from privbench.io import atomic_write_text
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
    setting = FileSetting(cfg, attack, DeclaredImages(args.batch_size), int(cfg.seed))
    victim = Victim(num_images=args.batch_size)
    with run_log(out), console_log():
        play = game_for(attack.view).play(setting, victim, message.payload, message.base, [], model, data)
        target = getattr(play.view, "target", play.view)  # the gradient view (a label view's knowledge reads it)
        target.knowledge["input_normalisation"] = {"inputs": args.inputs, **(
            {"mean": list(mean), "std": list(std)} if args.inputs == "normalised" else {})}
        finding = attack.attack(play.view, seed=setting.seed)
        scored = p.truth is not None and all(getattr(finding, k, None) is not None for k in ("images", "labels"))
        if scored:
            images, labels = p.truth
            play.answer.update(images=images, labels=(labels if labels is not None else
                                                      torch.full((len(images),), -1)).long(),
                               non_members=p.pool, non_member_labels=p.pool_labels)
        privacy = score_play(setting, play, finding, data, out)  # no truth images: the attempts only
        if scored:
            privacy.update(chance)
        atomic_write_text(out / "config.yaml", OmegaConf.to_yaml(cfg))
    threat = dict(play.view.knowledge)
    run = {"name": "attack-file", "source": str(args.file), "payload": message.payload.kind,
           "attack": attack.name, "model": str(cfg.model._target_), "data": str(cfg.data.get("source", "")),
           "seed": int(cfg.seed), "num_images": args.batch_size, "inputs": inputs, "versions": versions()}
    return {"run": run, "privacy": privacy, "threat_model": threat}
