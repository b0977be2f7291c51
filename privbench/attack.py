"""``python -m privbench.attack FILE``: attack one recorded message, captured by privbench or anywhere else.

FILE is a ``.safetensors`` payload, a payload store folder (with ``--id``), or a file of
named tensors saved with ``torch.save`` (e.g. ``{name: p.grad}``). The model and attack come
from privbench's config groups (``model=``, ``attack=`` and their keys, as for an audit);
the rest of what the attacker knows is given as options. With ``--truth`` the
reconstruction is scored, against the chance level of non-member images when there are
some (``--non-members``, or the test split of ``data=``). The outputs are an audit's:
``metrics.json``, ``threat_model.json``, ``config.yaml``, ``grid.png``, ``gallery.npz``, ``run.log``.

Example:
    python -m privbench.attack grads.pt --batch-size 1 --truth truth.pt model=lenet attack=idlg
    python -m privbench.attack update.pt --kind update --base start.pt --batch-size 8 --local-batch-size 4 \
        --epochs 2 --lr 0.1 --truth truth.pt model=lenet attack=ig attack.unroll=true
"""
from __future__ import annotations

import argparse
import math
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from privbench.errors import ConfigError, PrivbenchError
from privbench.payloads import Payload, PayloadStore
from privbench.payloads.encoding import decode
from privbench.payloads.kinds import KINDS
from privbench.payloads.training import LocalTraining


@dataclass(frozen=True)
class Recorded:
    """A message to attack and the model it is relative to (for kinds that carry a model)."""

    payload: Payload
    base: Payload | None


#: Most bytes a tensor file may inflate to (a torch.save file is a zip; its entries are checked before reading).
MAX_FILE_BYTES = 4 * 2**30


def _inflated_size(path: Path) -> int:
    """What a ``torch.save`` zip holds once inflated (its entries' declared sizes); the file's size otherwise."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return sum(entry.file_size for entry in archive.infolist())
    return path.stat().st_size


def _tensors(path: Path, *, integer: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """Named tensors from a ``.safetensors`` file or a ``torch.save``d dict, checked before use: at most
    ``MAX_FILE_BYTES`` once inflated, loaded with ``weights_only`` (tensors only, no code), every tensor dense,
    at least one-dimensional, floating (``integer`` names may be integer) and finite."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    size = _inflated_size(path)
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: inflates to {size:,} bytes, more than the {MAX_FILE_BYTES:,} a message may hold")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            loaded: object = dict(load_file(str(path)))
        else:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unreadable, or not tensors only
        text = str(exc).splitlines()[0][:200] if str(exc).strip() else "unreadable"
        reason = ("it holds objects other than tensors, which privbench does not load" if "weights_only" in str(exc)
                  else text)
        raise ConfigError(f"{path}: not a file of named tensors ({reason})") from None
    if isinstance(loaded, torch.Tensor):
        raise ConfigError(f"{path} holds one tensor; save a dict of named tensors ({{name: tensor}}), "
                          "e.g. {n: p.grad for n, p in model.named_parameters()}")
    if not isinstance(loaded, dict) or not loaded or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise ConfigError(f"{path} must hold a dict of named tensors")
    out = {str(k): v for k, v in loaded.items()}
    for name, t in out.items():
        if t.layout != torch.strided or t.dim() == 0:
            raise ConfigError(f"{path}: {name} must be a dense tensor of at least one dimension")
        if name in integer and not t.is_floating_point():
            continue
        if not t.is_floating_point():
            raise ConfigError(f"{path}: {name} is {str(t.dtype).removeprefix('torch.')}, not a floating tensor")
        if not bool(torch.isfinite(t).all()):
            raise ConfigError(f"{path}: {name} holds NaN or infinite values")
    return out


def check_names(tensors: dict[str, torch.Tensor], expected: dict[str, list[int]], *, what: str) -> None:
    """``tensors`` must carry some of the ``expected`` names (the model's), each with its shape, and nothing else."""
    unknown = [n for n in tensors if n not in expected]
    if unknown or not tensors:
        raise ConfigError(f"{what}: its names {sorted(tensors)[:6]} are not the model's ({sorted(expected)[:6]}"
                          f"{', ...' if len(expected) > 6 else ''}); check model= and how the names were saved")
    wrong = [n for n, t in tensors.items() if list(t.shape) != expected[n]]
    if wrong:
        n = wrong[0]
        raise ConfigError(f"{what}: {n} is {list(tensors[n].shape)}, the model's is {expected[n]}")


def recorded(source: Path, *, payload_id: str | None, kind: str, base: Path | None,
             training: LocalTraining | None, batch_size: int, trusted: bool = False) -> Recorded:
    """The message in ``source`` (a store folder plus ``payload_id``, or a tensor file) and its base."""
    if source.is_dir():
        if payload_id is None:
            raise ConfigError(f"{source} is a payload store: give --id (one of the ids in its index.json)")
        store = PayloadStore.open(source, trusted=trusted)
        payload = store.load(payload_id)
        base_payload = store.load(payload.base) if payload.base and base is None else None
    else:
        if kind not in KINDS:
            raise ConfigError(f"--kind {kind}: allowed: {', '.join(KINDS)}")
        tensors = _tensors(source)
        payload = Payload.from_tensors(kind=kind, round=0, sender="client", receiver="server", tensors=tensors,
                                       training=training or LocalTraining(lr=1.0, steps=1, batch_size=batch_size,
                                                                          num_samples=batch_size))
        base_payload = None
    if base is not None:
        base_payload = Payload.from_tensors(kind="global_model", round=payload.round, sender="server",
                                            receiver=payload.sender, tensors=_tensors(base))
    if training is not None and payload.training is None:
        payload.training = training
    if payload.spec.carries == "model" and base_payload is None:
        raise ConfigError(f"a {payload.kind} payload carries a model: give --base, the weights the client started from")
    try:
        payload = decode(payload, base_payload.tensors if base_payload is not None else None)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return Recorded(payload, base_payload)


def _truth(path: Path) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``images`` (``[N, C, H, W]`` in [0, 1]) and optional ``labels`` from a tensor file."""
    tensors = _tensors(path, integer=("labels",))
    if "images" not in tensors:
        raise ConfigError(f"{path}: needs a tensor named 'images' ([N, C, H, W] in [0, 1]) and optionally 'labels'")
    images = tensors["images"].float()
    if images.ndim != 4 or images.min() < 0 or images.max() > 1:
        raise ConfigError(f"{path}: 'images' must be [N, C, H, W] in [0, 1]; got {tuple(images.shape)}")
    return images, tensors.get("labels")


def _stats(values: tuple[float, ...]) -> str:
    return "/".join(f"{v:.3f}" for v in values)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m privbench.attack", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="overrides: model=..., attack=..., data=... and their keys, e.g. "
                                       "attack.iterations=300 (see python -m privbench --help)")
    p.add_argument("file", type=Path, help="a .safetensors payload, a payload store folder, or a torch.save'd dict")
    p.add_argument("overrides", nargs="*", help="config overrides for model, attack, data, seed, metrics")
    p.add_argument("--id", dest="payload_id", help="the payload id, when FILE is a payload store")
    p.add_argument("--kind", default="gradient", help="what FILE's tensors are (default gradient; "
                   "update/learngene carry a model and need --base, --lr and --steps)")
    p.add_argument("--base", type=Path, help="the weights the model had before the message (needed for update, "
                   "learngene; for a gradient, the weights it was computed at)")
    p.add_argument("--batch-size", type=int, default=1, help="images the message was computed from, all of which "
                   "the attack rebuilds (default 1); for an update, the client's number of samples")
    p.add_argument("--lr", type=float, help="the client's learning rate (kinds that carry a model)")
    p.add_argument("--steps", type=int, help="the client's local SGD steps (kinds that carry a model; default "
                   "--epochs x ceil(samples / --local-batch-size))")
    p.add_argument("--epochs", type=int, help="the client's local epochs (default 1)")
    p.add_argument("--local-batch-size", type=int, help="the client's SGD batch size (default: all its samples in "
                   "one batch); with attack.unroll=true its batches are replayed in order")
    p.add_argument("--momentum", type=float, help="the client's SGD momentum (default 0)")
    p.add_argument("--clip", type=float, help="the per-sample clip norm C of the client's DP-SGD (public under "
                   "DP-SGD): candidates are clipped to it as the client's gradients were")
    p.add_argument("--truth", type=Path, help="the true images ('images' [N,C,H,W] in [0,1], optional 'labels')")
    p.add_argument("--non-members", type=Path, help="images the client never had, for the chance level "
                   "(with 'labels', also the class-informed one; default: the test split of data=)")
    p.add_argument("--out", type=Path, default=Path("results/attack"), help="output folder (default results/attack)")
    p.add_argument("--inputs", choices=("normalised", "raw"), default="normalised",
                   help="how the model's inputs were scaled when the message was computed: normalised (default: "
                   "with data='s per-channel mean and std) or raw (pixels in [0, 1])")
    p.add_argument("--trusted-store", action="store_true", help="open a payload store that lacks its sha256 records "
                   "(only one whose origin you know)")
    return p


def _training(args: argparse.Namespace) -> LocalTraining | None:
    """What the client declared about its training, checked: learning rate, steps (or epochs and local batch size,
    from which the steps follow), momentum and DP-SGD's clip norm; None when nothing is declared."""
    schedule = (args.lr, args.steps, args.epochs, args.local_batch_size, args.momentum)
    if all(v is None for v in (*schedule, args.clip)):
        return None
    if args.clip is not None and (not math.isfinite(args.clip) or args.clip <= 0):
        raise ConfigError(f"--clip {args.clip}: the clip norm must be a positive number")
    n = args.batch_size
    if all(v is None for v in schedule):  # a clipped gradient: one step on the batch
        return LocalTraining(lr=1.0, steps=1, batch_size=n, num_samples=n, clip=args.clip)
    if args.lr is None or not math.isfinite(args.lr) or args.lr <= 0:
        raise ConfigError("--lr and --steps go together: a positive learning rate and at least one step "
                          "(--steps, or --epochs and --local-batch-size)")
    for flag, value in (("--steps", args.steps), ("--epochs", args.epochs), ("--local-batch-size", args.local_batch_size)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} {value}: must be at least 1")
    momentum = 0.0 if args.momentum is None else args.momentum
    if not (math.isfinite(momentum) and 0 <= momentum < 1):
        raise ConfigError(f"--momentum {args.momentum}: must be in [0, 1)")
    batch, epochs = min(args.local_batch_size or n, n), args.epochs or 1
    steps = epochs * math.ceil(n / batch)
    if args.steps is not None:
        if (args.epochs is not None or args.local_batch_size is not None) and args.steps != steps:
            raise ConfigError(f"--steps {args.steps} disagrees with --epochs {epochs} x ceil({n} / {batch}) = {steps}")
        steps = args.steps
    elif args.epochs is None and args.local_batch_size is None:
        raise ConfigError("--lr and --steps go together: a positive learning rate and at least one step "
                          "(--steps, or --epochs and --local-batch-size)")
    return LocalTraining(lr=args.lr, steps=steps, batch_size=batch, num_samples=n, epochs=epochs, momentum=momentum,
                         clip=args.clip)


def attack_file(args: argparse.Namespace) -> dict[str, Any]:
    """Check everything, then attack, score and write; returns the metrics written."""
    from privbench.overrides import compose
    from privbench.attacks import AttackTarget, GradientInversion
    from privbench.build import build
    from privbench.audit.output import summary, write_metrics
    from privbench.audit.score import score_reconstruction
    from privbench.io import atomic_write_text
    from privbench.metrics.reconstruction import Recovered
    from privbench.attacks.views import LabelView
    from privbench.pixels import denormalise
    from privbench.progress import run_log
    from privbench.provenance import versions

    start = time.perf_counter()
    if args.batch_size < 1:
        raise ConfigError("--batch-size must be at least 1")
    cfg = compose(list(args.overrides))
    attack = build("attack", cfg.attack)
    if not isinstance(attack, GradientInversion):
        raise ConfigError(f"attack={type(attack).__name__.lower()} cannot read a recorded message; "
                          "use dlg, idlg or ig")
    message = recorded(args.file, payload_id=args.payload_id, kind=args.kind, base=args.base,
                       training=_training(args), batch_size=args.batch_size, trusted=args.trusted_store)
    reason = attack.cannot_read(message.payload.kind)
    if reason:
        raise ConfigError(f"attack={attack.name} cannot attack a {message.payload.kind}: {reason}")
    truth = _truth(args.truth) if args.truth else None
    non_members, non_member_labels = _truth(args.non_members) if args.non_members else (None, None)
    data = build("data", cfg.data, seed=int(cfg.seed))
    c, h, _ = data.train.shape
    torch.manual_seed(int(cfg.seed))
    model = build("model", cfg.model, in_channels=c, image_size=h, num_classes=data.train.num_classes)
    assert message.payload.tensors is not None
    check_names(message.payload.tensors, {n: list(p.shape) for n, p in model.named_parameters()},
                what=str(args.file))
    if message.base is not None and message.base.tensors is not None:
        check_names(message.base.tensors, {n: list(t.shape) for n, t in model.state_dict().items()},
                    what=str(args.base or "its base"))
    if truth is not None and tuple(truth[0].shape[1:]) != tuple(data.train.shape):
        raise ConfigError(f"{args.truth}: 'images' are {list(truth[0].shape[1:])}, data= images are "
                          f"{list(data.train.shape)}")
    if message.base is None:  # a gradient computed at weights the attacker does not have
        print("privbench.attack: no --base: the gradient is matched at the model's initial weights", file=sys.stderr)
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
    args.out.mkdir(parents=True, exist_ok=True)
    with run_log(args.out):
        target = AttackTarget.from_payload(message.payload, base=message.base, model=model,
                                           num_images=args.batch_size, image_shape=data.train.shape,
                                           num_classes=data.train.num_classes, mean=mean, std=std,
                                           unroll=attack.unroll)
        target.knowledge["input_normalisation"] = {"inputs": args.inputs,
                                                   **({"mean": list(mean), "std": list(std)}
                                                      if args.inputs == "normalised" else {})}
        view: Any = target
        if attack.view == "labels":  # a batch's labels from its counts, read with the task's labelled test split
            view = LabelView.from_test_split(target, data.test.images, data.test.labels,
                                             count=int(getattr(attack, "public", 2000)), seed=int(cfg.seed),
                                             mean=mean, std=std)
            target.knowledge["public_data"] = view.knowledge["public_data"]
        result = attack.attack(view, seed=int(cfg.seed))
        privacy: dict[str, Any] = {"failed": result.failed, "objective": result.objective,
                                   "label_source": result.label_source, "attempts": result.attempts}
        if truth is not None and result.images is not None and result.labels is not None:
            recon = denormalise(result.images, mean, std)
            images, labels = truth
            labels = labels if labels is not None else torch.full((len(images),), -1)
            pool, pool_labels = ((non_members, non_member_labels) if non_members is not None
                                 else (data.test.images.float() / 255.0, data.test.labels))
            privacy.update(score_reconstruction(recon, result.labels, images, labels.long(), non_members=pool,
                                                seed=int(cfg.seed), match_on=str(cfg.metrics.match_on),
                                                use_lpips=bool(cfg.metrics.lpips), out=args.out,
                                                non_member_labels=pool_labels, recovered=Recovered.of(cfg.metrics)))
        atomic_write_text(args.out / "config.yaml", OmegaConf.to_yaml(cfg))
        run = {"name": "attack-file", "source": str(args.file), "payload": message.payload.kind,
               "attack": attack.name, "model": str(cfg.model._target_), "data": str(cfg.data.get("source", "")),
               "seed": int(cfg.seed), "num_images": args.batch_size, "inputs": inputs, "versions": versions()}
        metrics = {"run": run, "privacy": privacy, "threat_model": dict(target.knowledge),
                   "timing": {"attack_s": time.perf_counter() - start}}
        write_metrics(args.out, metrics)
    print(summary(metrics))
    print(f"results: {args.out}")
    return metrics


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_intermixed_args(argv)
    try:
        attack_file(args)
    except PrivbenchError as exc:
        print(f"privbench.attack: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
