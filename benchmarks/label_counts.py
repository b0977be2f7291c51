"""Label counts from a gradient at round 0: how often the bias-based estimate (attack=labels) gets every count right.

For LeNet and the ConvNet at their initialisation (seeds 0..T-1), a batch of B images drawn from the embedded
Fashion-MNIST train split (any of its 10 classes), one gradient of the mean cross-entropy; the attack reads the
head's bias gradient with 2,000 labelled test-split images as its public data. Prints, per model and batch size,
the fraction of batches whose every per-class count is exact, the mean absolute count error per class, and the
same for a prior that knows only the class frequencies.

    python benchmarks/label_counts.py [--trials 40]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from privbench.attacks.label_counts import counts_from_bias
from privbench.data.embedded import load_fashion_mnist_subset
from privbench.metrics.labels import prior_counts
from privbench.models import ConvNet, LeNet
from privbench.pixels import normalise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    args = parser.parse_args()
    train, test = load_fashion_mnist_subset(train=True), load_fashion_mnist_subset(train=False)
    x_train = normalise(train.images.float() / 255.0, train.mean, train.std)
    public = normalise(test.images[:2000].float() / 255.0, train.mean, train.std)
    public_labels = test.labels[:2000]
    frequencies = torch.bincount(train.labels, minlength=10).double() / len(train.labels)
    makers = {"lenet": lambda: LeNet(in_channels=1, image_size=28, num_classes=10),
              "convnet": lambda: ConvNet(in_channels=1, image_size=28, num_classes=10)}
    print(f"{'model':8} {'batch':>5} {'exact':>6} {'error/class':>11} {'prior exact':>11} {'prior error':>11}")
    start = time.perf_counter()
    for name, make in makers.items():
        for batch in (1, 2, 4, 8, 16, 32, 64):
            rng = np.random.default_rng(batch)
            exact, error, prior_exact, prior_error = [], [], [], []
            for seed in range(args.trials):
                torch.manual_seed(seed)
                model = make()
                rows = torch.from_numpy(rng.choice(len(train.labels), batch, replace=False))
                loss = F.cross_entropy(model(x_train[rows]), train.labels[rows])
                bias = torch.autograd.grad(loss, [model.fc.bias])[0]
                with torch.no_grad():
                    p = F.softmax(model(public), 1)
                conditional = torch.stack([p[public_labels == k].mean(0) for k in range(10)])
                counts = counts_from_bias(bias, batch, conditional)
                true = np.bincount(train.labels[rows].numpy(), minlength=10)
                prior = np.array([prior_counts(frequencies, batch)[k] for k in range(10)])
                exact.append((counts == true).all())
                error.append(np.abs(counts - true).mean())
                prior_exact.append((prior == true).all())
                prior_error.append(np.abs(prior - true).mean())
            print(f"{name:8} {batch:>5} {np.mean(exact):>6.3f} {np.mean(error):>11.3f} {np.mean(prior_exact):>11.3f} "
                  f"{np.mean(prior_error):>11.3f}")
    print(f"{args.trials} batches per row; {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
