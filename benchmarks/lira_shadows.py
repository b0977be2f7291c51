"""LiRA's shadow client-rounds: K shadows trained as one stacked model against the same K trained one by one in
plain PyTorch (torch.optim.SGD), on one client's declared training from a model at initialisation.

Each shadow trains on ``--samples`` records of the embedded Fashion-MNIST subset, ``--epochs`` epochs of batch
``--batch`` (SGD, lr 0.1). The one-by-one figure trains ``--plain`` shadows (plain SGD, no penalty) and scales to K.

    OMP_NUM_THREADS=2 python benchmarks/lira_shadows.py                    # 64 LeNet shadows, 80 records, 30 epochs
    OMP_NUM_THREADS=2 python benchmarks/lira_shadows.py --model convnet
    OMP_NUM_THREADS=2 python benchmarks/lira_shadows.py --lambda2 1.0       # with GENE-FL's Fisher-elastic term
"""
from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.nn.functional as F

from privbench.attacks.membership.shadows import ShadowTraining, train_shadows
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.models import MLP, ConvNet, LeNet
from privbench.pixels import normalise

MODELS = {"lenet": LeNet, "convnet": ConvNet, "mlp": MLP}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="lenet")
    parser.add_argument("--shadows", type=int, default=64)
    parser.add_argument("--samples", type=int, default=80)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lambda2", type=float, default=0.0)
    parser.add_argument("--plain", type=int, default=4, help="shadows trained one by one (scaled to --shadows)")
    args = parser.parse_args()
    train = load_fashion_mnist_subset(train=True)
    x = normalise(train.images[:2000].float() / 255.0, train.mean, train.std)
    y = train.labels[:2000].long()
    torch.manual_seed(0)
    model = MODELS[args.model](in_channels=1, image_size=28, num_classes=10)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    plan = ShadowTraining(lr=0.1, epochs=args.epochs, batch_size=args.batch, lambda1=0.01 if args.lambda2 else 0.0,
                          lambda2=args.lambda2, eps=1e-6)
    datasets = torch.stack([torch.randperm(2000, generator=torch.Generator().manual_seed(k))[:args.samples]
                            for k in range(args.shadows)])
    warm = ShadowTraining(lr=0.1, epochs=1, batch_size=args.batch)
    train_shadows(model, base, warm, x, y, datasets[:, :args.batch], torch.Generator())  # first calls out of the timing
    start = time.perf_counter()
    train_shadows(model, base, plan, x, y, datasets, torch.Generator().manual_seed(1))
    stacked = time.perf_counter() - start
    start = time.perf_counter()
    for k in range(args.plain):
        local = copy.deepcopy(model)
        opt = torch.optim.SGD(local.parameters(), lr=plan.lr)
        for _ in range(plan.epochs):
            order = datasets[k][torch.randperm(args.samples)]
            for first in range(0, args.samples, plan.batch_size):
                rows = order[first:first + plan.batch_size]
                opt.zero_grad()
                F.cross_entropy(local(x[rows]), y[rows]).backward()
                opt.step()
    plain = (time.perf_counter() - start) / args.plain * args.shadows
    steps = plan.steps(args.samples)
    print(f"{args.model}: {args.shadows} shadows x {steps} steps (batch {args.batch}, lambda2 {args.lambda2:g}), "
          f"{torch.get_num_threads()} threads")
    print(f"stacked {stacked:.1f} s | one by one {plain:.1f} s (from {args.plain}) | speed-up {plain / stacked:.2f}x")


if __name__ == "__main__":
    main()
