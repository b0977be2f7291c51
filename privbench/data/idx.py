"""Reader for the idx format of (Fashion-)MNIST, gzipped or not."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np


def read_idx(path: Path) -> np.ndarray:
    """Read an idx file into a uint8 numpy array of the shape its header gives."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if raw[2] != 0x08:
        raise ValueError(f"{path}: only unsigned-byte idx files are supported")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
