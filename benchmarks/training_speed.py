"""Training phase of the default audit, clients one by one against stacked (``fl.vectorise``), and per batch size.

Runs the default audit's training (GENE-FL, 10 rounds of 5 LeNet clients, the FedAvg reference
and the agnostic clients; no attack) through ``privbench.run`` and prints its ``timing.train_s``
for ``fl.vectorise=false`` and ``true``, at the default local batch size and at the smaller
ones given. Figures depend on the machine; run it alone.

Example:
    python benchmarks/training_speed.py --batch-sizes 32 4
"""
from __future__ import annotations

import argparse
import tempfile

import torch

import privbench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 8, 2], help="fl.batch_size values")
    parser.add_argument("--rounds", type=int, default=10, help="fl.rounds")
    args = parser.parse_args()
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
