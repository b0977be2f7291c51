"""``python -m privbench.attack FILE``: attack one recorded message, captured by privbench or anywhere else.

FILE is a ``.safetensors`` payload, a payload store folder (with ``--id``), or a file of
named tensors saved with ``torch.save`` (e.g. ``{name: p.grad}``). The model and attack come
from privbench's config groups (``model=``, ``attack=`` and their keys, as for an audit);
the rest of what the attacker knows is given as options. With ``--truth`` the
reconstruction is scored, against the chance level of non-member images when there are
some (``--non-members``, or the test split of ``data=``). The outputs are an audit's:
``metrics.json``, ``threat_model.json``, ``config.yaml``, ``grid.png``, ``gallery.npz``, ``run.log``, in a new
timestamped folder under ``--out``. What FILE holds is checked against ``--kind`` and the truth's size against
``--batch-size`` before anything is computed.

Example:
    python -m privbench.attack grads.pt --base weights.pt --batch-size 1 --truth truth.pt model=lenet attack=idlg
    python -m privbench.attack update.pt --kind update --base start.pt --batch-size 8 --local-batch-size 4 \
        --epochs 2 --lr 0.1 --truth truth.pt model=lenet attack=ig attack.unroll=true
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from privbench.errors import ConfigError, PrivbenchError
from privbench.file_game import play_file
from privbench.file_message import Recorded, declared_training, read_truth, recorded
from privbench.tensor_files import check_names, model_bound


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m privbench.attack", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="overrides: model=..., attack=... (dlg, idlg, ig, ig_paper, fedavg_inversion, "
                                       "sme: the inversions "
                                       "that read one message), data=... and their keys, e.g. attack.iterations=300 (see "
                                       "python -m privbench --help).\n\nexample: python -m privbench.attack gradient.pt "
                                       "--kind gradient --base start.pt --batch-size 1 --truth truth.pt model=lenet "
                                       "attack=idlg\n(a complete client that writes these files: docs/attack-a-file.md)")
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
    p.add_argument("--out", type=Path, default=Path("results/attack"), help="where results go: each attack writes a "
                   "new timestamped folder under it, never over a finished one (default results/attack)")
    p.add_argument("--kind-check", choices=("on", "off"), default="on", help="check that FILE holds what --kind "
                   "declares (weights vs a gradient: by the distance to --base, or the last-layer bias of a "
                   "cross-entropy gradient summing to 0); off only for a gradient of another loss")
    p.add_argument("--inputs", choices=("normalised", "raw"), default="normalised",
                   help="how the model's inputs were scaled when the message was computed: normalised (default: "
                   "with data='s per-channel mean and std) or raw (pixels in [0, 1])")
    p.add_argument("--trusted-store", action="store_true", help="open a payload store that lacks its sha256 records "
                   "(only one whose origin you know)")
    return p


@dataclass
class Prepared:
    """Everything a file attack needs, checked before any compute: the config, attack, message, truth, pools,
    data and model, and the chance pool's provenance."""

    cfg: Any
    attack: Any
    message: Recorded
    truth: tuple[torch.Tensor, torch.Tensor | None] | None
    pool: torch.Tensor
    pool_labels: torch.Tensor | None
    chance_from: str
    data: Any
    model: torch.nn.Module


def prepare(args: argparse.Namespace) -> Prepared:
    """Compose the config and check every file against it and against what it is declared to be."""
    from privbench.attacks.reconstruction.base import GradientInversion
    from privbench.audit.memory import check_memory, check_unrolled_steps, inversion_bytes
    from privbench.build import build
    from privbench.declared import check_kind, check_truth_count
    from privbench.overrides import compose

    if args.batch_size < 1:
        raise ConfigError("--batch-size must be at least 1")
    cfg = compose(list(args.overrides))
    attack = build("attack", cfg.attack)
    if not isinstance(attack, GradientInversion):
        raise ConfigError(f"attack={type(attack).__name__.lower()} cannot read a recorded message; "
                          "use dlg, idlg or ig")
    if args.batch_size > attack.max_images:  # before any file is read or anything allocated for the images
        raise ConfigError(f"--batch-size {args.batch_size}: the attack would rebuild {args.batch_size} images, more "
                          f"than attack.max_images={attack.max_images}")
    training = declared_training(args)
    if attack.unroll and training is not None:
        check_unrolled_steps(training.steps, f"--steps {training.steps}")
    data = build("data", cfg.data, seed=int(cfg.seed))
    c, h, _ = data.train.shape
    torch.manual_seed(int(cfg.seed))
    model = build("model", cfg.model, in_channels=c, image_size=h, num_classes=data.train.num_classes)
    params = sum(t.numel() for t in model.parameters())
    steps = training.steps if attack.unroll and training is not None else 1
    check_memory(inversion_bytes(problems=attack.restarts, images=args.batch_size, image_shape=tuple(data.train.shape),
                                 params=params, steps=steps, batch=training.batch_size if training else None),
                 f"--batch-size {args.batch_size} x attack.restarts={attack.restarts}"
                 + (f" x {steps} unrolled steps" if steps > 1 else ""))
    message = recorded(args.file, payload_id=args.payload_id, kind=args.kind, base=args.base, training=training,
                       batch_size=args.batch_size, trusted=args.trusted_store, limit=model_bound(model))
    reason = attack.cannot_read(message.payload.kind)
    if reason:
        raise ConfigError(f"attack={attack.name} cannot attack a {message.payload.kind}: {reason}")
    # the true images: --batch-size images in float64, and 1 MiB
    truth = read_truth(args.truth, 8 * args.batch_size * math.prod(data.train.shape) + 2**20) if args.truth else None
    if truth is not None:
        check_truth_count(len(truth[0]), args.batch_size, what=str(args.truth))
    non_members, non_member_labels = read_truth(args.non_members) if args.non_members else (None, None)
    assert message.payload.tensors is not None
    check_names(message.payload.tensors, {n: list(p.shape) for n, p in model.named_parameters()},
                what=str(args.file))
    base = message.base.tensors if message.base is not None else None
    if base is not None:
        check_names(base, {n: list(t.shape) for n, t in model.state_dict().items()}, what=str(args.base or "its base"))
    if args.kind_check == "on" and not args.file.is_dir():
        check_kind(message.payload.kind, message.payload.spec.carries, message.payload.tensors, base=base,
                   model=model, what=str(args.file), noisy=args.clip is not None)
    pool, pool_labels, chance_from = _chance_pool(args, cfg, data, truth, non_members, non_member_labels)
    return Prepared(cfg, attack, message, truth, pool, pool_labels, chance_from, data, model)


def _chance_pool(args: argparse.Namespace, cfg: Any, data: Any, truth: tuple[torch.Tensor, Any] | None,
                 non_members: torch.Tensor | None, non_member_labels: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor | None, str]:
    """The images chance is drawn from (``--non-members``, else the test split of ``data=``), with their labels and
    provenance; the truth's and the pool's image shape checked against ``data=``'s."""
    for name, images in (("--truth", truth), ("--non-members", (non_members, None))):
        if images is not None and images[0] is not None and tuple(images[0].shape[1:]) != tuple(data.train.shape):
            raise ConfigError(f"{name}: 'images' are {list(images[0].shape[1:])}, data= images are "
                              f"{list(data.train.shape)}")
    if non_members is not None:
        return non_members, non_member_labels, f"--non-members {args.non_members} ({len(non_members)} images)"
    pool = data.test.images.float() / 255.0
    return pool, data.test.labels, f"data={cfg.data.get('source', '')}'s test split ({len(pool)} images)"


def _chance_pool_check(p: Prepared, seed: int) -> dict[str, Any]:
    """Whether the truth looks like the chance pool; a one-line warning when it does not."""
    from privbench.declared import MIN_POOL, resemblance

    if p.truth is None:
        return {"chance_from": p.chance_from}
    if len(p.pool) < MIN_POOL:
        print(f"privbench.attack: warning: {p.chance_from}: too few images to tell whether the truth looks like "
              f"them (at least {MIN_POOL}); chance is scored against them as they are", file=sys.stderr)
        return {"chance_from": p.chance_from, "chance_pool_alike": None}
    near = resemblance(p.truth[0], p.pool, seed=seed)
    if not near.alike:
        print(f"privbench.attack: warning: the --truth images do not look like the chance pool, {p.chance_from} "
              f"(median nearest-neighbour PSNR {near.truth_db:.1f} dB, below its own images' 1 % quantile "
              f"{near.pool_quantile_db:.1f} dB): chance and the gain are scored against it; give --non-members "
              "images of the truth's own kind", file=sys.stderr)
    return {"chance_from": p.chance_from, "chance_pool_alike": near.alike,
            "chance_pool_nn_psnr": {"truth": near.truth_db, "pool_1pct": near.pool_quantile_db}}


def attack_file(args: argparse.Namespace) -> dict[str, Any]:
    """Check everything, then attack, score and write into a new folder under ``--out``; returns the metrics."""
    from privbench.io import new_run_folder

    start = time.perf_counter()
    prepared = prepare(args)
    if prepared.message.base is None:  # a gradient computed at weights the attacker does not have
        print("privbench.attack: no --base: the gradient is matched at the model's initial weights", file=sys.stderr)
    chance = _chance_pool_check(prepared, int(prepared.cfg.seed))
    out = new_run_folder(args.out)
    try:
        metrics = play_file(args, prepared, out, chance)
    except BaseException as exc:
        _leave_no_refusal_behind(out, exc)
        raise
    metrics["timing"] = {"attack_s": time.perf_counter() - start}
    from privbench.audit.output import write_metrics
    from privbench.audit.summary import summary

    write_metrics(out, metrics)
    print(summary(metrics))
    print(f"results: {out}")
    return metrics


def _leave_no_refusal_behind(out: Path, exc: BaseException) -> None:
    """A run that ends in an error keeps no folder of its own holding nothing but its log; else the error is
    written beside what it wrote (``error.txt``)."""
    import shutil

    from privbench.io import atomic_write_text

    if {p.name for p in out.iterdir()} <= {"run.log"}:
        shutil.rmtree(out, ignore_errors=True)
    else:
        atomic_write_text(out / "error.txt", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}\n")


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_intermixed_args(argv)
    try:
        attack_file(args)
    except PrivbenchError as exc:
        print(f"privbench.attack: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
