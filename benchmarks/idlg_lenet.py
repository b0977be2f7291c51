"""iDLG on a one-image ``gradient`` payload of DLG's LeNet, embedded Fashion-MNIST, 10 seeds.

For each seed: a fresh LeNet (uniform(-0.5, 0.5) init from that seed), one image of
client 0 chosen by the seed, the client's one-step gradient recorded as a Payload, and
iDLG with 300 L-BFGS iterations and restarts. Prints per-seed label, PSNR, SSIM, time.

Example:
    python benchmarks/idlg_lenet.py --seeds 10
"""
from __future__ import annotations

import argparse
import time

import torch

from privbench.attacks.reconstruction.idlg import IDLG
from privbench.attacks.target import AttackTarget
from privbench.data import FederatedData, denormalise
from privbench.fl.sgd import batch_gradient
from privbench.metrics.image import psnr, ssim
from privbench.models import LeNet
from privbench.payloads import Payload
from privbench.victim import Victim


def run_seed(data: FederatedData, seed: int, *, iterations: int, restarts: int) -> dict:
    """Attack one seed's gradient payload; return label, PSNR, SSIM and seconds."""
    torch.manual_seed(seed)
    model = LeNet(in_channels=1, image_size=28, num_classes=10)
    client = data.client(0)
    pos = torch.from_numpy(Victim(num_images=1).batch_positions(len(client), seed=seed))
    x, y = client.normalised(pos), client.labels[pos]
    base = Payload.from_tensors(kind="global_model", round=0, sender="server", receiver="client0", tensors=model.state_dict())
    grad = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server",
                                tensors=batch_gradient(model, x, y), base=base.id)
    target = AttackTarget.from_payload(grad, base=base, model=model, num_images=1, image_shape=(1, 28, 28), num_classes=10)
    start = time.perf_counter()
    result = IDLG(iterations=iterations, restarts=restarts).attack(target, seed=seed)
    seconds = time.perf_counter() - start
    rec = denormalise(result.images[0], data.train.mean, data.train.std)
    truth = denormalise(x[0], data.train.mean, data.train.std)
    return {"seed": seed, "label": int(y), "recovered": int(result.labels[0]), "psnr": psnr(rec, truth),
            "ssim": ssim(rec, truth), "attempts": len(result.attempts), "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--restarts", type=int, default=4)
    args = parser.parse_args()
    data = FederatedData.build(source="fashion_mnist_subset", num_clients=10, partition="iid")
    rows = []
    print(f"{'seed':>4} {'label':>5} {'iDLG':>5} {'PSNR dB':>8} {'SSIM':>6} {'tries':>5} {'s':>6}")
    for seed in range(args.seeds):
        row = run_seed(data, seed, iterations=args.iterations, restarts=args.restarts)
        rows.append(row)
        print(f"{row['seed']:>4} {row['label']:>5} {row['recovered']:>5} {row['psnr']:>8.2f} {row['ssim']:>6.3f} "
              f"{row['attempts']:>5} {row['seconds']:>6.1f}", flush=True)
    finite = [min(r["psnr"], 100.0) for r in rows]
    print(f"label accuracy {sum(r['label'] == r['recovered'] for r in rows)}/{len(rows)}; "
          f"mean PSNR {sum(finite) / len(finite):.2f} dB (inf capped at 100); "
          f"total {sum(r['seconds'] for r in rows):.1f} s")


if __name__ == "__main__":
    main()
