"""Training phase of the default audit, clients one by one against stacked (``fl.vectorise``), and per batch size.

Runs the default audit's training (GENE-FL, 10 rounds of 5 LeNet clients, the FedAvg reference
and the agnostic clients; no attack) through ``privbench.run`` and prints its ``timing.train_s``
for ``fl.vectorise=false`` and ``true``, at the default local batch size and at the smaller
ones given. Figures depend on the machine; run it alone.

With ``--floor`` it instead counts the SGD steps and Fisher passes of the default training
and times one LeNet SGD step at the default batch on 1 and 2 threads, in the default memory
layout and in channels-last, and in two 1-thread processes side by side: steps x milliseconds is
what the training costs in SGD arithmetic alone, however the clients are scheduled.

Example:
    python benchmarks/training_speed.py --batch-sizes 32 4
    python benchmarks/training_speed.py --floor
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
import torch.nn.functional as F

import privbench
import privbench.fl.fisher as fisher_module
import privbench.fl.trainer as trainer_module
from privbench.models import LeNet


def floor() -> None:
    """Steps and Fisher passes of the default training, and milliseconds per SGD step (LeNet, batch 32)."""
    counts = {"steps": 0, "fisher": 0, "fisher_s": 0.0}
    local_train, squared_gradients = trainer_module.local_train, fisher_module.squared_gradients

    def counted_train(*args: Any, **kwargs: Any) -> int:
        steps = local_train(*args, **kwargs)
        counts["steps"] += steps
        return steps

    def counted_fisher(*args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        start = time.perf_counter()
        out = squared_gradients(*args, **kwargs)
        counts["fisher"] += 1
        counts["fisher_s"] += time.perf_counter() - start
        return out

    trainer_module.local_train = counted_train
    fisher_module.squared_gradients = counted_fisher
    try:
        with tempfile.TemporaryDirectory() as tmp:
            result = privbench.run(["attack=none"], results_dir=tmp)
    finally:
        trainer_module.local_train, fisher_module.squared_gradients = local_train, squared_gradients
    print(f"default training: {result.metrics['timing']['train_s']:.1f} s; {counts['steps']} SGD steps by the "
          f"trainers; {counts['fisher']} Fisher passes, {counts['fisher_s']:.1f} s")
    threads_before = torch.get_num_threads()
    print(f"{'threads':>7} {'layout':>14} {'ms/step':>8} {'steps x ms/step s':>18}")
    ms: dict[tuple[int, str], float] = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for layout in (torch.contiguous_format, torch.channels_last):
            name = "channels_last" if layout is torch.channels_last else "default"
            ms[threads, name] = step_ms(layout)
            print(f"{threads:>7} {name:>14} {ms[threads, name]:>8.2f} {counts['steps'] * ms[threads, name] / 1e3:>18.1f}",
                  flush=True)
    torch.set_num_threads(threads_before)
    print(f"largest weight difference after 30 steps, channels_last against default: {layout_difference():.1e}")
    command = [sys.executable, __file__, "--step-ms"]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    pair = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=environment) for _ in range(2)]
    side_by_side = [float(p.communicate()[0]) for p in pair]
    print(f"two 1-thread processes side by side (default layout): {side_by_side[0]:.2f} and {side_by_side[1]:.2f} "
          f"ms/step each")
    train_s = result.metrics["timing"]["train_s"]
    one = counts["steps"] * ms[threads_before, "default"] / 1e3 + counts["fisher_s"]
    together = 1 / sum(1 / t for t in side_by_side)
    two = counts["steps"] * together / 1e3 + counts["fisher_s"] / 2
    print(f"SGD steps + Fisher passes at {threads_before} threads: {one:.1f} s of the {train_s:.1f} s training "
          f"({one / train_s:.0%}): at most {train_s / one:.2f}x faster in one process without less arithmetic; "
          f"on two 1-thread processes at best {two:.1f} s ({train_s / two:.2f}x)")


def layout_difference(steps: int = 30) -> float:
    """Largest absolute difference of LeNet's weights after ``steps`` SGD steps, channels-last against default."""
    weights = []
    for layout in (torch.contiguous_format, torch.channels_last):
        torch.manual_seed(0)
        model = LeNet(in_channels=1, image_size=28, num_classes=10).to(memory_format=layout)
        optimizer, generator = torch.optim.SGD(model.parameters(), lr=0.1), torch.Generator().manual_seed(1)
        for _ in range(steps):
            x, y = torch.randn(32, 1, 28, 28, generator=generator), torch.randint(0, 10, (32,), generator=generator)
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    return float((weights[0] - weights[1]).abs().max())


def step_ms(layout: torch.memory_format = torch.contiguous_format) -> float:
    """Milliseconds per LeNet SGD step at batch 32 on this process's threads, best of 3 x 100 after a warm-up."""
    torch.manual_seed(0)
    model = LeNet(in_channels=1, image_size=28, num_classes=10).to(memory_format=layout)
    x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    best = float("inf")
    for _ in range(3):
        for _ in range(10):  # warm-up
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        start = time.perf_counter()
        for _ in range(100):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        best = min(best, (time.perf_counter() - start) / 100 * 1e3)
    return best

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 8, 2], help="fl.batch_size values")
    parser.add_argument("--rounds", type=int, default=10, help="fl.rounds")
    parser.add_argument("--floor", action="store_true", help="count steps and time one SGD step instead")
    parser.add_argument("--step-ms", action="store_true", help=argparse.SUPPRESS)  # one timing, for --floor
    args = parser.parse_args()
    if args.step_ms:
        torch.set_num_threads(1)
        print(step_ms())
        return
    if args.floor:
        floor()
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; default audit training, "
          f"{args.rounds} rounds, attack=none")
    print(f"{'batch':>6} {'one by one s':>13} {'vectorised s':>13} {'speed-up':>9} {'accuracy':>17}")
    for batch in args.batch_sizes:
        seconds, accuracy = {}, {}
        for vectorise in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                result = privbench.run(["attack=none", f"fl.vectorise={str(vectorise).lower()}",
                                        f"fl.batch_size={batch}", f"fl.rounds={args.rounds}"], results_dir=tmp)
            seconds[vectorise] = result.metrics["timing"]["train_s"]
            accuracy[vectorise] = result.metrics["utility"]["accuracy"]
        print(f"{batch:>6} {seconds[False]:>13.1f} {seconds[True]:>13.1f} {seconds[False] / seconds[True]:>8.2f}x "
              f"{accuracy[False]:>8.3f}/{accuracy[True]:.3f}", flush=True)


if __name__ == "__main__":
    main()
