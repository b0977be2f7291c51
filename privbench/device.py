"""Where models, training and attacks run (``device=auto|cpu|cuda|cuda:N|mps``), checked before any compute."""
from __future__ import annotations

import os
import re

import torch

from privbench.errors import ConfigError

#: The values ``device`` takes.
FORMS = "auto, cpu, cuda, cuda:N or mps"


def resolve(spec: str) -> torch.device:
    """The device ``spec`` names, or a ``ConfigError`` saying why it cannot be used here.

    ``auto`` is CUDA when torch sees a CUDA device, else the CPU.

    Example:
        >>> resolve("cpu")
        device(type='cpu')
    """
    if not isinstance(spec, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", spec):
        raise ConfigError(f"device={spec!r}: allowed {FORMS}")
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={spec}: torch {torch.__version__} sees no CUDA device here "
                              "(torch.cuda.is_available() is False); use device=cpu or device=auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device={spec}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                              f"cuda:0..cuda:{torch.cuda.device_count() - 1}")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device={spec}: torch sees no Apple MPS device here; use device=cpu or device=auto")
    return device


def make_deterministic(device: torch.device) -> None:
    """PyTorch's deterministic settings for ``device`` (CUDA: deterministic kernels, cuBLAS workspace).

    On the CPU privbench's seeded runs repeat exactly without them. On CUDA the same seed gives
    the same numbers on the same GPU and software versions; operations without a deterministic
    CUDA kernel warn instead of failing.
    """
    if device.type != "cuda":
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
