"""What exact recovery costs beside optimisation: SPEAR and the Cocktail Party Attack against Inverting Gradients.

Each attack reads the same message, FedAvg's 2NN (``model=mlp``) one-step gradient at round 0 on the victim's
``B`` images (IID clients, seed 0), through the CLI as a user runs it (each run in its own results folder; LPIPS
off). Printed per attack and batch: the attack's wall seconds (``timing.attack_s`` of ``metrics.json``, training
excluded), the share of images recovered at 20 dB, the share certified exact, and the mean matched PSNR.

Example:
    python benchmarks/exact_cost.py --images 8 16
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: attack name -> its overrides (each at its default budget; IG's is privbench's, the paper's is 24x longer)
ATTACKS = {"spear": ["attack=spear"], "cpa": ["attack=cpa"], "ig": ["attack=ig"]}
SETTING = ["fl=fedavg", "model=mlp", "payload=gradient", "fl.rounds=1", "data.partition=iid", "metrics.lpips=false"]


def run(attack: str, images: int, *, seed: int, root: Path) -> dict[str, float]:
    """One audit; its attack seconds and figures from ``metrics.json``."""
    out = root / f"{attack}-{images}"
    cmd = [sys.executable, "-m", "privbench", *SETTING, *ATTACKS[attack], f"victim.num_images={images}",
           f"seed={seed}", f"results_dir={out}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, "CI": "true"})
    metrics = json.loads(next(out.rglob("metrics.json")).read_text())
    privacy = metrics["privacy"]
    return {"attack_s": metrics["timing"]["attack_s"], "recovered": privacy.get("recovered_fraction", float("nan")),
            "certified": privacy.get("certified_fraction", float("nan")), "psnr": privacy.get("psnr_mean", float("nan"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{'attack':>6} {'images':>6} {'attack s':>9} {'recovered':>9} {'certified':>9} {'PSNR dB':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for images in args.images:
            for attack in ATTACKS:
                r = run(attack, images, seed=args.seed, root=Path(tmp))
                print(f"{attack:>6} {images:>6} {r['attack_s']:>9.1f} {r['recovered']:>9.3f} {r['certified']:>9.3f} "
                      f"{r['psnr']:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
