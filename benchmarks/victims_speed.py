"""Victims per second: Inverting Gradients on every client of a round, one by one against batched (``attack_many``).

Each victim sends a one-step ``gradient`` of one image at the same LeNet (embedded
Fashion-MNIST); the attack runs ``--restarts`` restarts of ``--iterations`` Adam steps per
victim. ``victim.clients=all`` in an audit takes the batched path for IG.

Example:
    python benchmarks/victims_speed.py --victims 5 --iterations 100
"""
from __future__ import annotations

import argparse
import time

import torch

from privbench.attacks.reconstruction.ig import InvertingGradients
from privbench.attacks.target import AttackTarget
from privbench.data import FederatedData
from privbench.fl.sgd import batch_gradient
from privbench.models import ConvNet, LeNet
from privbench.payloads import Payload

MODELS = {"lenet": LeNet, "convnet": ConvNet}


def targets(model_name: str, victims: int, data: FederatedData) -> list[AttackTarget]:
    """One gradient payload per victim, each of its own image, at one shared model."""
    torch.manual_seed(0)
    model = MODELS[model_name](in_channels=1, image_size=28, num_classes=10)
    base = Payload.from_tensors(kind="global_model", round=0, sender="server", receiver="client0",
                                tensors=model.state_dict())
    out = []
    for v in range(victims):
        x, y = data.train.normalised(slice(v, v + 1)), data.train.labels[v : v + 1]
        grad = Payload.from_tensors(kind="gradient", round=0, sender=f"client{v}", receiver="server",
                                    tensors=batch_gradient(model, x, y), base=base.id)
        out.append(AttackTarget.from_payload(grad, base=base, model=model, num_images=1, image_shape=(1, 28, 28),
                                             num_classes=10, mean=data.train.mean, std=data.train.std))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--victims", type=int, default=5, help="clients attacked")
    parser.add_argument("--iterations", type=int, default=100, help="Adam steps per restart")
    parser.add_argument("--restarts", type=int, default=2, help="restarts per victim")
    args = parser.parse_args()
    data = FederatedData.build(source="fashion_mnist_subset", num_clients=10, partition="iid")
    attack = InvertingGradients(iterations=args.iterations, restarts=args.restarts)
    attack.attack_many(targets("lenet", 2, data), seed=0)  # warm-up, untimed
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; IG, {args.victims} victims x "
          f"{args.restarts} restarts x {args.iterations} iterations")
    print(f"{'model':>8} {'one by one s':>13} {'victims/s':>10} {'batched s':>10} {'victims/s':>10} {'speed-up':>9}")
    for model_name in MODELS:
        start = time.perf_counter()
        for target in targets(model_name, args.victims, data):
            attack.attack(target, seed=0)
        alone = time.perf_counter() - start
        start = time.perf_counter()
        attack.attack_many(targets(model_name, args.victims, data), seed=0)
        together = time.perf_counter() - start
        print(f"{model_name:>8} {alone:>13.2f} {args.victims / alone:>10.2f} {together:>10.2f} "
              f"{args.victims / together:>10.2f} {alone / together:>8.2f}x", flush=True)


if __name__ == "__main__":
    main()
