"""Named tensors from files a user hands privbench (a message, its base, the true images): read only after
their declared sizes are checked, loaded as tensors only, and checked against the model they claim to fit."""
from __future__ import annotations

import zipfile
from pathlib import Path

import torch

from privbench.errors import ConfigError

#: Most bytes a tensor file may inflate to (a torch.save file is a zip; its entries are checked before reading);
#: a file checked against a model gets the tighter bound ``model_bound``.
MAX_FILE_BYTES = 4 * 2**30
#: Most an entry of a ``torch.save`` zip may inflate by (torch stores its entries uncompressed: ratio 1).
MAX_RATIO = 16
#: Bytes a file may hold beyond its tensors (names, headers, pickled structure).
SLACK_BYTES = 2**20


def model_bound(model: torch.nn.Module) -> int:
    """Most bytes a file of ``model``'s named tensors may inflate to: every tensor of its state in float64."""
    return 8 * sum(t.numel() for t in model.state_dict().values()) + SLACK_BYTES


def inflated_size(path: Path) -> int:
    """What a ``torch.save`` zip holds once inflated (its entries' declared sizes); the file's size otherwise.

    Raises:
        ConfigError: an entry declares more than ``MAX_RATIO`` times its compressed size (a zip bomb).
    """
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
            for entry in entries:
                if entry.file_size > MAX_RATIO * max(entry.compress_size, 1) + SLACK_BYTES:
                    raise ConfigError(f"{path}: entry {entry.filename[:60]!r} inflates {entry.compress_size:,} bytes "
                                      f"to {entry.file_size:,}, more than {MAX_RATIO} times (torch.save does not "
                                      "compress)")
            return sum(entry.file_size for entry in entries)
    return path.stat().st_size


def named_tensors(path: Path, *, integer: tuple[str, ...] = (), limit: int | None = None) -> dict[str, torch.Tensor]:
    """Named tensors from a ``.safetensors`` file or a ``torch.save``d dict, checked before use: a regular file, at
    most ``limit`` bytes (default and at most ``MAX_FILE_BYTES``) once inflated, each zip entry at most ``MAX_RATIO``
    times its stored size, loaded with ``weights_only`` (tensors only, no code), every tensor dense, at least
    one-dimensional, no larger than its storage and all within the bound (``check_extent``, before any is read),
    floating (``integer`` names may be integer) and finite."""
    if not path.is_file():  # a regular file (after links): never a pipe or a device
        raise ConfigError(f"{path}: no such file" if not path.exists() else f"{path}: not a regular file")
    bound = MAX_FILE_BYTES if limit is None else min(limit, MAX_FILE_BYTES)
    size = inflated_size(path)
    if size > bound:
        raise ConfigError(f"{path}: inflates to {size:,} bytes, more than the {bound:,} a message may hold"
                          + (" (its model's tensors in float64, and 1 MiB)" if bound < MAX_FILE_BYTES else ""))
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            loaded: object = dict(load_file(str(path)))
        else:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unreadable, or not tensors only
        text = str(exc).splitlines()[0][:200] if str(exc).strip() else "unreadable"
        reason = ("it holds objects other than tensors, which privbench does not load" if "weights_only" in str(exc)
                  else text)
        raise ConfigError(f"{path}: not a file of named tensors ({reason})") from None
    if isinstance(loaded, torch.Tensor):
        raise ConfigError(f"{path} holds one tensor; save a dict of named tensors ({{name: tensor}}), "
                          "e.g. {n: p.grad for n, p in model.named_parameters()}")
    if not isinstance(loaded, dict) or not loaded or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise ConfigError(f"{path} must hold a dict of named tensors")
    out = {str(k): v for k, v in loaded.items()}
    for name, t in out.items():
        if t.layout != torch.strided or t.dim() == 0:
            raise ConfigError(f"{path}: {name} must be a dense tensor of at least one dimension")
    check_extent(path, out, bound)
    for name, t in out.items():
        if name in integer and not t.is_floating_point():
            continue
        if not t.is_floating_point():
            raise ConfigError(f"{path}: {name} is {str(t.dtype).removeprefix('torch.')}, not a floating tensor")
        if not bool(torch.isfinite(t).all()):
            raise ConfigError(f"{path}: {name} holds NaN or infinite values")
    return out


def check_extent(path: Path, tensors: dict[str, torch.Tensor], bound: int) -> None:
    """Before any tensor is read: each spans no more bytes than its storage holds (no expanded or overlapping
    view, whose reductions would allocate its whole logical size), and all together at most ``bound`` bytes."""
    total = 0
    for name, t in tensors.items():
        logical, stored = t.numel() * t.element_size(), t.untyped_storage().nbytes()
        if logical > stored:
            raise ConfigError(f"{path}: {name} is a view of {logical:,} bytes ({list(t.shape)[:8]}) over a storage of "
                              f"{stored:,}; save it with .clone() (an expanded or overlapping view is not loaded)")
        total += logical
        if total > bound:
            raise ConfigError(f"{path}: its tensors hold {total:,} bytes by {name}, more than the {bound:,} a file "
                              "may hold")


def check_names(tensors: dict[str, torch.Tensor], expected: dict[str, list[int]], *, what: str) -> None:
    """``tensors`` must carry some of the ``expected`` names (the model's), each with its shape, and nothing else."""
    unknown = [n for n in tensors if n not in expected]
    if unknown or not tensors:
        raise ConfigError(f"{what}: its names {sorted(tensors)[:6]} are not the model's ({sorted(expected)[:6]}"
                          f"{', ...' if len(expected) > 6 else ''}); check model= and how the names were saved")
    wrong = [n for n, t in tensors.items() if list(t.shape) != expected[n]]
    if wrong:
        n = wrong[0]
        raise ConfigError(f"{what}: {n} is {list(tensors[n].shape)}, the model's is {expected[n]}")
