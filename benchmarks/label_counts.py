"""Label counts from a gradient at round 0: how often attack=labels gets every count right.

For LeNet and the ConvNet at their initialisation (seeds 0..T-1), a batch of B images drawn from the embedded
Fashion-MNIST train split (any of its 10 classes), one gradient of the mean cross-entropy; the attack reads the
head's bias gradient (``estimator=bias``) or its weight and bias gradients by 4,000 shadow batches and one refit
(``estimator=head``, the default for a gradient), with the 1,000 labelled test-split images as its public data.
Prints, per model and batch size, the fraction of batches whose every per-class count is exact and the mean
absolute count error per class for each estimator, and the same for a prior that knows only the class
frequencies.

    python benchmarks/label_counts.py [--trials 40]

With ``--update``, each batch instead trains a FedAvg client for ``--epochs`` reshuffled epochs of ``--local-batch``
at ``--lr`` (plain SGD) and the attack reads its update: the counts are estimated at the received model alone
(``points`` 1) and along the update's path (``points`` 8, ``attack.points``), LeNet, the ConvNet and FedAvg's 2NN.

    python benchmarks/label_counts.py --update [--epochs 2 --local-batch 8 --lr 0.1]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from privbench.attacks.labels.bias import counts_from_bias, estimate_counts
from privbench.attacks.labels.head import counts_from_head
from privbench.attacks.target import AttackTarget
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.metrics.labels import prior_counts
from privbench.models import MLP, ConvNet, LeNet
from privbench.pixels import normalise


def updates(args: argparse.Namespace) -> None:
    """Counts from multi-step updates, at the received model and along the update's path."""
    train, test = load_fashion_mnist_subset(train=True), load_fashion_mnist_subset(train=False)
    x_train = normalise(train.images.float() / 255.0, train.mean, train.std)
    public = normalise(test.images[:2000].float() / 255.0, train.mean, train.std)
    makers = {"lenet": lambda: LeNet(in_channels=1, image_size=28, num_classes=10),
              "convnet": lambda: ConvNet(in_channels=1, image_size=28, num_classes=10),
              "mlp": lambda: MLP(in_channels=1, image_size=28, num_classes=10)}
    print(f"updates: {args.epochs} epochs of batch {args.local_batch}, lr {args.lr}")
    print(f"{'model':8} {'images':>6} {'exact p=1':>9} {'err p=1':>8} {'exact p=8':>9} {'err p=8':>8}")
    start = time.perf_counter()
    for name, make in makers.items():
        for batch in (8, 16, 32, 64):
            rng = np.random.default_rng(batch)
            rows_out: dict[int, list[tuple[bool, float]]] = {1: [], 8: []}
            for seed in range(args.trials):
                torch.manual_seed(seed)
                model = make()
                start_state = {k: v.detach().clone() for k, v in model.named_parameters()}
                rows = torch.from_numpy(rng.choice(len(train.labels), batch, replace=False))
                client = make()
                client.load_state_dict(model.state_dict())
                optimiser = torch.optim.SGD(client.parameters(), lr=args.lr)
                generator, steps = torch.Generator().manual_seed(seed), 0
                for _ in range(args.epochs):
                    order = rows[torch.randperm(batch, generator=generator)]
                    for s in range(0, batch, args.local_batch):
                        optimiser.zero_grad()
                        idx = order[s:s + args.local_batch]
                        F.cross_entropy(client(x_train[idx]), train.labels[idx]).backward()
                        optimiser.step()
                        steps += 1
                observed = {k: -(p.detach() - start_state[k]) / (args.lr * steps) for k, p in client.named_parameters()}
                training = {"lr": args.lr, "steps": steps}
                target = AttackTarget(model, observed, batch, (1, 28, 28), 10,
                                      knowledge={"training": training, "matching": "pseudo-gradient"})
                true = np.bincount(train.labels[rows].numpy(), minlength=10)
                for points in (1, 8):
                    counts = estimate_counts(target, public, test.labels[:2000], points=points)
                    rows_out[points].append((bool((counts == true).all()), float(np.abs(counts - true).mean())))
            one, eight = np.array(rows_out[1]), np.array(rows_out[8])
            print(f"{name:8} {batch:>6} {one[:, 0].mean():>9.3f} {one[:, 1].mean():>8.3f} {eight[:, 0].mean():>9.3f} "
                  f"{eight[:, 1].mean():>8.3f}")
    print(f"{args.trials} updates per row; {time.perf_counter() - start:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--update", action="store_true", help="read multi-step updates instead of gradients")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--local-batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    if args.update:
        updates(args)
        return
    train, test = load_fashion_mnist_subset(train=True), load_fashion_mnist_subset(train=False)
    x_train = normalise(train.images.float() / 255.0, train.mean, train.std)
    public = normalise(test.images[:2000].float() / 255.0, train.mean, train.std)
    public_labels = test.labels[:2000]
    frequencies = torch.bincount(train.labels, minlength=10).double() / len(train.labels)
    makers = {"lenet": lambda: LeNet(in_channels=1, image_size=28, num_classes=10),
              "convnet": lambda: ConvNet(in_channels=1, image_size=28, num_classes=10)}
    print(f"{'model':8} {'batch':>5} {'bias exact':>10} {'bias error':>10} {'head exact':>10} {'head error':>10} "
          f"{'prior exact':>11} {'prior error':>11}")
    start = time.perf_counter()
    for name, make in makers.items():
        for batch in (1, 2, 4, 8, 16, 32, 64):
            rng = np.random.default_rng(batch)
            exact, error, head_exact, head_error, prior_exact, prior_error = [], [], [], [], [], []
            for seed in range(args.trials):
                torch.manual_seed(seed)
                model = make()
                rows = torch.from_numpy(rng.choice(len(train.labels), batch, replace=False))
                loss = F.cross_entropy(model(x_train[rows]), train.labels[rows])
                weight, bias = torch.autograd.grad(loss, [model.fc.weight, model.fc.bias])
                with torch.no_grad():
                    p = F.softmax(model(public), 1)
                conditional = torch.stack([p[public_labels == k].mean(0) for k in range(10)])
                counts = counts_from_bias(bias, batch, conditional)
                true = np.bincount(train.labels[rows].numpy(), minlength=10)
                target = AttackTarget(model, {"fc.weight": weight, "fc.bias": bias}, batch, (1, 28, 28), 10)
                head = counts_from_head(target, public, public_labels, seed=seed)
                head_exact.append((head == true).all())
                head_error.append(np.abs(head - true).mean())
                prior = np.array([prior_counts(frequencies, batch)[k] for k in range(10)])
                exact.append((counts == true).all())
                error.append(np.abs(counts - true).mean())
                prior_exact.append((prior == true).all())
                prior_error.append(np.abs(prior - true).mean())
            print(f"{name:8} {batch:>5} {np.mean(exact):>10.3f} {np.mean(error):>10.3f} {np.mean(head_exact):>10.3f} "
                  f"{np.mean(head_error):>10.3f} {np.mean(prior_exact):>11.3f} {np.mean(prior_error):>11.3f}")
    print(f"{args.trials} batches per row; {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
