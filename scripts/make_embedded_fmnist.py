"""Build the embedded Fashion-MNIST subset shipped in ``privbench/data/assets``.

Reads the idx files installed by Debian's ``dataset-fashion-mnist`` package
(``apt-get install -y dataset-fashion-mnist``), draws a stratified subset with a fixed
seed and writes it as a compressed ``.npz`` of uint8 arrays. Prints the sha256 that
``privbench.data.embedded`` checks at load.

Example:
    python scripts/make_embedded_fmnist.py --train-per-class 600 --test-per-class 100
"""
from __future__ import annotations

import argparse
import hashlib
import io
from pathlib import Path

import numpy as np

from privbench.data.idx import read_idx

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
OUT = Path(__file__).resolve().parents[1] / "privbench" / "data" / "assets" / "fashion_mnist_subset.npz"


def stratified(labels: np.ndarray, per_class: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``per_class`` random samples of every class, sorted."""
    picks = [rng.choice(np.flatnonzero(labels == c), per_class, replace=False) for c in np.unique(labels)]
    return np.sort(np.concatenate(picks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEBIAN_DIR)
    parser.add_argument("--train-per-class", type=int, default=600)
    parser.add_argument("--test-per-class", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    arrays = {}
    for split, prefix, per_class in (("train", "train", args.train_per_class), ("test", "t10k", args.test_per_class)):
        images = read_idx(args.source / f"{prefix}-images-idx3-ubyte.gz")
        labels = read_idx(args.source / f"{prefix}-labels-idx1-ubyte.gz")
        keep = stratified(labels, per_class, rng)
        arrays[f"{split}_images"] = images[keep]
        arrays[f"{split}_labels"] = labels[keep]
        arrays[f"{split}_source_index"] = keep.astype(np.int32)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(buffer.getvalue())
    print(f"wrote {args.out} ({len(buffer.getvalue()) / 1e6:.2f} MB)")
    print(f"sha256 {hashlib.sha256(buffer.getvalue()).hexdigest()}")


if __name__ == "__main__":
    main()
