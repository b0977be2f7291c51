"""Where models, training and attacks run (``device=auto|cpu|cuda|cuda:N|mps``) and on how many torch threads
(``threads=auto|N``), checked before any compute."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

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


#: Below this many multiply-adds per training step (one forward pass of a batch), a second torch thread
#: buys nothing measurable on the CPU: the default audit's LeNet (13 M) ran as fast on one thread as on
#: two, a 32-wide ConvNet (124 M) 1.8x faster on two (``benchmarks/shared_machine.py``).
SMALL_STEP_MACS = 50_000_000
#: The most threads ``threads=N`` may ask for.
MAX_THREADS = 1024


@dataclass(frozen=True)
class Threads:
    """How many torch threads a run uses, and why (printed in the run log)."""

    count: int
    reason: str

    def __str__(self) -> str:
        return f"{self.count} ({self.reason})"


def forward_macs(model: torch.nn.Module, sample: torch.Tensor) -> int:
    """Multiply-adds of one forward pass of ``model`` on ``sample`` (convolutions and linear layers)."""
    total = 0

    def count(module: torch.nn.Module, _inputs: object, output: torch.Tensor) -> None:
        nonlocal total
        if isinstance(module, torch.nn.Conv2d):
            kh, kw = module.kernel_size
            total += output.numel() * (module.in_channels // module.groups) * kh * kw
        elif isinstance(module, torch.nn.Linear):
            total += output.numel() * module.in_features

    hooks = [m.register_forward_hook(count) for m in model.modules()
             if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    training = model.training
    model.eval()  # batch norm's running statistics stay as they were
    try:
        with torch.no_grad():
            model(sample)
    finally:
        model.train(training)
        for hook in hooks:
            hook.remove()
    return total


def check_threads(spec: object) -> None:
    """Raise a one-line ``ConfigError`` unless ``spec`` is ``auto`` or a thread count."""
    if spec == "auto":
        return
    if isinstance(spec, bool) or not isinstance(spec, int) or not 1 <= spec <= MAX_THREADS:
        raise ConfigError(f"threads={spec!r}: allowed auto or an integer in [1, {MAX_THREADS}]")


def choose_threads(spec: object, *, step_macs: int, device: torch.device, jobs: int = 1,
                   cores: int | None = None, environ: dict[str, str] | None = None) -> Threads:
    """The torch thread count for a run: ``threads=N``, else ``OMP_NUM_THREADS``, else what the run needs.

    ``auto`` gives one thread to a run whose training step is under ``SMALL_STEP_MACS`` on the CPU
    (a second would only spin beside other processes), otherwise its share of the cores
    (``cores // jobs`` for ``jobs`` parallel sweep jobs).
    """
    check_threads(spec)
    cores = cores or os.cpu_count() or 1
    env = os.environ if environ is None else environ
    if spec != "auto":
        assert isinstance(spec, int)
        return Threads(spec, "threads=" + str(spec))
    omp = env.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) >= 1:
        return Threads(int(omp), f"OMP_NUM_THREADS={omp}")
    share = max(1, cores // max(1, jobs))
    of = f"of {cores} cores" + (f", {jobs} parallel jobs" if jobs > 1 else "")
    if device.type == "cpu" and step_macs < SMALL_STEP_MACS:
        return Threads(1, f"auto, {of}: {step_macs / 1e6:.0f} M multiply-adds per training step gain nothing "
                          "from a second thread; threads=N overrides")
    return Threads(share, f"auto, {of}: {step_macs / 1e6:.0f} M multiply-adds per training step; "
                          "threads=N overrides")
