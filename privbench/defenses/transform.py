"""Shared by payload defences: transform what a payload reveals (a model's change, or the tensors themselves)."""
from __future__ import annotations

import zlib
from collections.abc import Callable

import torch

from privbench.payloads import Payload


def transform(payload: Payload, base: dict[str, torch.Tensor] | None,
              fn: Callable[[str, torch.Tensor], torch.Tensor], *, protection: str) -> Payload:
    """Apply ``fn(name, tensor)`` to what ``payload`` reveals and return the new payload (its bytes recounted),
    noting ``protection``.

    For payloads that carry a model, with a known base, ``fn`` sees the change
    ``theta - theta_base`` of each floating tensor and the result is ``theta_base + fn(...)``;
    otherwise (gradients, subspaces) it sees the tensors themselves. Integer tensors pass
    unchanged.
    """
    assert payload.tensors is not None
    model_base = base if payload.spec.carries == "model" else None
    out = {}
    for name, t in payload.tensors.items():
        if not t.is_floating_point():
            out[name] = t
        elif model_base is not None and name in model_base:
            out[name] = model_base[name] + fn(name, t - model_base[name])
        else:
            out[name] = fn(name, t)
    return payload.with_tensors(out, protection=protection)


def payload_generator(seed: int, payload: Payload) -> torch.Generator:
    """A generator fixed by the run seed and the payload's id."""
    return torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(payload.id.encode()))
