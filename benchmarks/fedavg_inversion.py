"""FedAvg-aware inversion against Inverting Gradients' in-order unroll on the same updates: evaluations per
second, PSNR and the share recovered (matched PSNR >= 20 dB, Dimitrov et al.'s rule).

Each update is a plain-PyTorch FedAvg client (reshuffled epochs, SGD) on images of the embedded Fashion-MNIST
subset, FedAvg's 2NN at its initialisation; both attacks get the same update, budget and seed.

    python benchmarks/fedavg_inversion.py --seeds 1        # 10 images, 5 epochs of 2 batches: the README's rows
    python benchmarks/fedavg_inversion.py --images 50 --epochs 10 --seeds 1 --iterations 1600 \
        --arms matched:0.03,matched:0.1                    # Dimitrov et al.'s client

``--arms``: ``tie:prior`` for the FedAvg-aware inversion (``matched`` or ``mean``), ``ig`` for IG's in-order unroll.
"""
from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch
import torch.nn.functional as F

from privbench.attacks.labels.views import LabelView
from privbench.attacks.reconstruction.fedavg_inversion import FedAvgInversion
from privbench.attacks.reconstruction.ig import InvertingGradients
from privbench.attacks.target import AttackTarget, Part, Unroll
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.metrics.reconstruction import score
from privbench.models import MLP
from privbench.pixels import bounds, denormalise, normalise


def update(n: int, epochs: int, batch: int, lr: float, seed: int) -> tuple[LabelView, torch.Tensor, torch.Tensor]:
    """The attacker's view of one client's update (with 1,000 labelled public test images) and its truth."""
    train, test = load_fashion_mnist_subset(train=True), load_fashion_mnist_subset(train=False)
    rows = torch.from_numpy(np.random.default_rng(seed).choice(len(train.labels), n, replace=False))
    pixels = train.images[rows].float() / 255.0
    x, y = normalise(pixels, train.mean, train.std), train.labels[rows]
    torch.manual_seed(seed)
    model = MLP(in_channels=1, image_size=28, num_classes=10)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    client = copy.deepcopy(model)
    optimiser = torch.optim.SGD(client.parameters(), lr=lr)
    generator, steps = torch.Generator().manual_seed(seed + 100), 0
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        for s in range(0, n, batch):
            optimiser.zero_grad()
            F.cross_entropy(client(x[order[s:s + batch]]), y[order[s:s + batch]]).backward()
            optimiser.step()
            steps += 1
    observed = {k: -(client.state_dict()[k] - start[k]) / (lr * steps) for k in start}
    training = {"lr": lr, "steps": steps, "batch_size": batch, "num_samples": n, "epochs": epochs}
    target = AttackTarget(model, observed, n, (1, 28, 28), 10, bounds(train.mean, train.std),
                          Unroll(lr, steps, parts=(Part(0, n, steps, batch),)),
                          knowledge={"payload": "plain", "training": training, "matching": "unrolled local training"})
    public = torch.randperm(len(test.labels), generator=torch.Generator().manual_seed(1))[:1000]
    view = LabelView(target, normalise(test.images[public].float() / 255.0, train.mean, train.std),
                     test.labels[public])
    return view, pixels, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.004)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--arms", default="matched:0.3,matched:0.1,mean:10,mean:0,ig")
    args = parser.parse_args()
    arms = []
    for arm in args.arms.split(","):
        if arm == "ig":
            arms.append(("ig unroll", lambda: InvertingGradients(iterations=args.iterations, restarts=1, unroll=True)))
        else:
            tie, prior = arm.split(":")
            arms.append((f"fedavg_inversion {tie} {prior}", lambda tie=tie, prior=float(prior): FedAvgInversion(
                iterations=args.iterations, tie=tie, prior=prior)))
    train = load_fashion_mnist_subset(train=True)
    print(f"{args.images} images, {args.epochs} epochs of batch {args.batch}, lr {args.lr}, 2NN, "
          f"{args.iterations} steps x 1 attempt; torch threads {torch.get_num_threads()}")
    print(f"{'seed':>4} {'attack':<28} {'PSNR dB':>8} {'>=20 dB':>8} {'labels':>7} {'evals/s':>8} {'s':>6}")
    for seed in range(args.seeds):
        for name, make in arms:
            attack = make()
            view, pixels, y = update(args.images, args.epochs, args.batch, args.lr, seed)
            start = time.perf_counter()
            found = attack.attack(view if isinstance(attack, FedAvgInversion) else view.target, seed=seed)
            seconds = time.perf_counter() - start
            recon = denormalise(found.images, train.mean, train.std).clamp(0, 1)
            rows = score(recon, pixels, recon_labels=found.labels, truth_labels=y, use_lpips=False)["matched"]
            psnr = np.array([r["psnr"] for r in rows])
            labels = np.mean([r["label_ok"] for r in rows])
            print(f"{seed:>4} {name:<28} {psnr.mean():>8.2f} {np.mean(psnr >= 20):>8.2f} {labels:>7.2f} "
                  f"{view.target.evaluations / seconds:>8.2f} {seconds:>6.1f}")


if __name__ == "__main__":
    main()
