"""Attack speed: cost per objective evaluation against a plain DLG loop, wall time, batched IG restarts.

Each attack runs one attempt of a fixed number of iterations on a one-step ``gradient``
payload of ``lenet`` and ``convnet`` (embedded Fashion-MNIST, 28x28), at 1 and 8 images, on
each thread count asked for. Next to privbench's DLG and iDLG runs a plain reference loop
written as the DLG paper's code does it (the model's own parameters, forward,
``autograd.grad(create_graph=True)``, a sum of squared differences, ``backward``, L-BFGS),
soft labels for DLG and the known labels for iDLG; ``ratio`` is privbench's milliseconds per
evaluation over the plain loop's. Figures depend on the machine; compare runs on the same one.

Example:
    python benchmarks/attack_speed.py --iterations 20
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

from privbench.attacks.reconstruction.dlg import DLG
from privbench.attacks.reconstruction.idlg import IDLG
from privbench.attacks.reconstruction.ig import InvertingGradients
from privbench.attacks.target import AttackTarget
from privbench.data import FederatedData
from privbench.fl.sgd import batch_gradient
from privbench.models import ConvNet, LeNet
from privbench.payloads import Payload

MODELS = {"lenet": LeNet, "convnet": ConvNet}


def target_for(model_name: str, num_images: int, data: FederatedData) -> AttackTarget:
    """A one-step gradient payload of ``num_images`` images, as the attacker sees it."""
    torch.manual_seed(0)
    model = MODELS[model_name](in_channels=1, image_size=28, num_classes=10)
    x, y = data.train.normalised(slice(0, num_images)), data.train.labels[:num_images]
    base = Payload.from_tensors(kind="global_model", round=0, sender="server", receiver="client0", tensors=model.state_dict())
    grad = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server",
                                tensors=batch_gradient(model, x, y), base=base.id)
    return AttackTarget.from_payload(grad, base=base, model=model, num_images=num_images, image_shape=(1, 28, 28),
                                     num_classes=10, mean=data.train.mean, std=data.train.std)


def plain_loop(model: nn.Module, observed: dict[str, torch.Tensor], num_images: int, *, iterations: int,
               labels: torch.Tensor | None) -> int:
    """The DLG paper's loop (soft labels; known ``labels`` as iDLG's code); returns objective evaluations."""
    torch.manual_seed(0)
    dummy = torch.randn(num_images, 1, 28, 28).requires_grad_(True)
    logits = torch.randn(num_images, 10).requires_grad_(True)
    optimizer = torch.optim.LBFGS([dummy] if labels is not None else [dummy, logits])
    original = [observed[n] for n, _ in model.named_parameters()]
    calls = [0]

    def closure() -> torch.Tensor:
        calls[0] += 1
        optimizer.zero_grad()
        pred = model(dummy)
        if labels is not None:
            loss = F.cross_entropy(pred, labels)
        else:
            loss = torch.mean(torch.sum(-F.softmax(logits, dim=-1) * F.log_softmax(pred, dim=-1), dim=-1))
        dy_dx = torch.autograd.grad(loss, list(model.parameters()), create_graph=True)
        diff = torch.zeros(())
        for gx, gy in zip(dy_dx, original):
            diff = diff + ((gx - gy) ** 2).sum()
        diff.backward()
        return diff

    for _ in range(iterations):
        optimizer.step(closure)
    return calls[0]


def per_evaluation(args: argparse.Namespace, data: FederatedData) -> None:
    """Milliseconds per objective evaluation, best of ``--repeats`` after a warm-up: privbench against the plain loop."""
    print(f"\nper evaluation, {args.iterations} L-BFGS iterations, best of {args.repeats} after a warm-up")
    print(f"{'threads':>7} {'model':>8} {'images':>6} {'attack':>6} {'plain ms':>9} {'privbench ms':>12} {'ratio':>6}")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for model_name, n in (("lenet", 1), ("convnet", 8)):
            for name, attack in (("dlg", DLG), ("idlg", IDLG)):
                target = target_for(model_name, n, data)
                plain_model = MODELS[model_name](in_channels=1, image_size=28, num_classes=10)
                plain_model.load_state_dict(target.model.state_dict())
                labels = data.train.labels[:n] if name == "idlg" else None
                # stall checks off so the attack runs its full budget
                runner = attack(iterations=args.iterations, restarts=1, converged=0.0, stall_at=1.0,
                                stall_tol=float("inf"))
                plain, ours = [], []
                for repeat in range(args.repeats + 1):
                    start = time.perf_counter()
                    calls = plain_loop(plain_model, target.gradient, n, iterations=args.iterations, labels=labels)
                    plain.append((time.perf_counter() - start) / calls * 1e3)
                    target.evaluations = 0
                    start = time.perf_counter()
                    runner.attack(target, seed=0)
                    ours.append((time.perf_counter() - start) / target.evaluations * 1e3)
                best_plain, best_ours = min(plain[1:]), min(ours[1:])  # the first run warms up
                print(f"{threads:>7} {model_name:>8} {n:>6} {name:>6} {best_plain:>9.2f} {best_ours:>12.2f} "
                      f"{best_ours / best_plain:>6.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20, help="optimiser steps per attack")
    parser.add_argument("--restarts", type=int, default=8, help="IG restarts batched against one restart")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per figure (the best is shown)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts to time")
    parser.add_argument("--only", choices=["restarts"], help="run only this section, on each thread count")
    args = parser.parse_args()
    data = FederatedData.build(source="fashion_mnist_subset", num_clients=10, partition="iid")
    attacks = {
        # stall checks off so every attack runs its full budget
        "dlg": DLG(iterations=args.iterations, restarts=1, converged=0.0, stall_at=1.0, stall_tol=float("inf")),
        "idlg": IDLG(iterations=args.iterations, restarts=1, converged=0.0, stall_at=1.0, stall_tol=float("inf")),
        "ig": InvertingGradients(iterations=args.iterations, restarts=1),
    }
    attacks["idlg"].attack(target_for("lenet", 1, data), seed=0)  # warm-up, untimed
    if args.only == "restarts":
        for threads in args.threads:
            torch.set_num_threads(threads)
            print(f"\ntorch {torch.__version__}, {threads} threads")
            restarts_section(args, data)
        return
    per_evaluation(args, data)
    torch.set_num_threads(args.threads[-1])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.iterations} iterations per attack")
    print(f"{'model':>8} {'images':>6} {'attack':>6} {'evals':>6} {'evals/s':>8} {'wall s':>7}")
    for model_name in MODELS:
        for n in (1, 8):
            for name, attack in attacks.items():
                target = target_for(model_name, n, data)
                start = time.perf_counter()
                attack.attack(target, seed=0)
                wall = time.perf_counter() - start
                print(f"{model_name:>8} {n:>6} {name:>6} {target.evaluations:>6} {target.evaluations / wall:>8.1f} "
                      f"{wall:>7.2f}", flush=True)
    restarts_section(args, data)


def restarts_section(args: argparse.Namespace, data: FederatedData) -> None:
    """IG: ``--restarts`` batched restarts against one, one by one, and one restart on as many images.

    The last does the batched restarts' arithmetic as one ordinary batch (shared weights, no per-restart
    parameter gradients): where it costs more than the target ratio, the ratio is bound by arithmetic."""
    print(f"\nIG restarts: {args.restarts} batched (one stacked optimisation) against 1, {args.iterations} iterations;"
          f" and 1 restart on {args.restarts} images (the same arithmetic as one ordinary batch)")
    print(f"{'model':>8} {'1 s':>7} {f'{args.restarts} batched s':>12} {'ratio':>6} {'one by one s':>13} "
          f"{f'{args.restarts} images s':>11} {'ratio':>6}")
    for model_name in MODELS:
        times = {}
        for label, restarts, batched, images in (("one", 1, True, 1), ("batched", args.restarts, True, 1),
                                                 ("sequential", args.restarts, False, 1),
                                                 ("images", 1, True, args.restarts)):
            best = []
            for _ in range(args.repeats):
                target = target_for(model_name, images, data)
                attack = InvertingGradients(iterations=args.iterations, restarts=restarts, batched=batched)
                start = time.perf_counter()
                attack.attack(target, seed=0)
                best.append(time.perf_counter() - start)
            times[label] = min(best)
        print(f"{model_name:>8} {times['one']:>7.2f} {times['batched']:>12.2f} {times['batched'] / times['one']:>6.2f} "
              f"{times['sequential']:>13.2f} {times['images']:>11.2f} {times['images'] / times['one']:>6.2f}", flush=True)

if __name__ == "__main__":
    main()
