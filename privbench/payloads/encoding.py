"""Encoded messages: a compressing transform sends what it encodes, and the reader decodes it.

``sparse`` (top-k with indices): each floating tensor ``n`` goes as ``n#values`` (float32, the kept entries),
``n#indices`` (int32, their flat positions) and ``n#shape`` (int64). ``quantized:<bits>`` (stochastic rounding to
``2^bits`` levels): ``n#codes`` (uint8, the level of every entry packed ``8 / bits`` to a byte, or two bytes a level
above 8 bits), ``n#range`` (float32, the lowest and highest level) and ``n#shape``. So a payload's bytes are those
of its encoded tensors: what it costs on the wire. On a model upload with a known base the encoded tensors are
its change from the model the client received (``Payload.encoding`` ends in ``/change``), and decoding adds the
base back. Integer tensors travel as they are.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from privbench.payloads.payload import Payload

SEPARATOR = "#"
PARTS = {"sparse": ("values", "indices", "shape"), "quantized": ("codes", "range", "shape")}


def plain_name(name: str) -> str:
    """The tensor name an encoded part belongs to (``fc.weight#values`` -> ``fc.weight``)."""
    return name.split(SEPARATOR, 1)[0]


def sparse(t: torch.Tensor, fraction: float) -> dict[str, torch.Tensor]:
    """The ``ceil(fraction * numel)`` largest-magnitude entries of ``t`` and their flat positions (ascending).

    Example:
        >>> sparse(torch.tensor([0.1, -3.0, 2.0, 0.5]), 0.5)["indices"]
        tensor([1, 2], dtype=torch.int32)
    """
    flat = t.detach().flatten()
    k = max(1, math.ceil(fraction * flat.numel())) if flat.numel() else 0
    keep = torch.topk(flat.abs(), k, sorted=False).indices.sort().values if k else torch.zeros(0, dtype=torch.long)
    return {"values": flat[keep].float(), "indices": keep.int(), "shape": torch.tensor(list(t.shape), dtype=torch.long)}


def quantized(t: torch.Tensor, bits: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """``t`` stochastically rounded to ``2^bits`` evenly spaced levels between its minimum and maximum (unbiased:
    each entry goes to a neighbouring level with probability by its distance), the levels packed."""
    flat = t.detach().flatten().double()
    lo, hi = (float(flat.min()), float(flat.max())) if flat.numel() else (0.0, 0.0)
    levels = 2**bits - 1
    scaled = (flat - lo) / (hi - lo) * levels if hi > lo else torch.zeros_like(flat)
    low = scaled.floor()
    codes = (low + (torch.rand(flat.shape, generator=generator, dtype=torch.float64) < scaled - low)).clamp(0, levels)
    packed = _pack(codes.long().numpy(), bits)
    return {"codes": torch.from_numpy(packed), "range": torch.tensor([lo, hi], dtype=torch.float32),
            "shape": torch.tensor(list(t.shape), dtype=torch.long)}


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    if bits > 8:
        return codes.astype("<u2").view(np.uint8)
    per = 8 // bits
    padded = np.zeros(math.ceil(len(codes) / per) * per, dtype=np.uint8)
    padded[: len(codes)] = codes
    shifts = (np.arange(per) * bits).astype(np.uint8)
    return np.bitwise_or.reduce(padded.reshape(-1, per) << shifts, axis=1).astype(np.uint8)


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    if bits > 8:
        return packed.view("<u2")[:count].astype(np.int64)
    per = 8 // bits
    shifts = (np.arange(per) * bits).astype(np.uint8)
    return ((packed[:, None] >> shifts) & (2**bits - 1)).reshape(-1)[:count].astype(np.int64)


def encode(payload: Payload, encoded: dict[str, dict[str, torch.Tensor]], *, scheme: str, relative: bool,
           protection: str) -> Payload:
    """``payload`` carrying ``encoded`` (each floating tensor's parts) instead of its floating tensors."""
    assert payload.tensors is not None
    tensors: dict[str, torch.Tensor] = {}
    for name, t in payload.tensors.items():
        if name in encoded:
            tensors.update({f"{name}{SEPARATOR}{part}": v for part, v in encoded[name].items()})
        else:
            tensors[name] = t
    sent = payload.with_tensors(tensors, protection=protection)
    return dataclasses.replace(sent, encoding=f"{scheme}/{'change' if relative else 'values'}")


def decode(payload: Payload, base: dict[str, torch.Tensor] | None) -> Payload:
    """The message as its reader uses it: every encoded tensor back at its name and shape (a change plus
    ``base``), its ``nbytes`` still the encoded message's; a payload without an encoding, or without its tensors,
    is returned as it is.

    Raises:
        ValueError: an encoded part is missing or inconsistent, or a change has no base to add to.
    """
    if payload.encoding is None or payload.tensors is None:
        return payload
    scheme, _, relative = payload.encoding.partition("/")
    kind, _, bits_text = scheme.partition(":")
    if kind not in PARTS or relative not in ("change", "values"):
        raise ValueError(f"{payload.id}: unknown encoding {payload.encoding!r}")
    out: dict[str, torch.Tensor] = {}
    names = list(dict.fromkeys(plain_name(n) for n in payload.tensors))
    for name in names:
        if name in payload.tensors:
            out[name] = payload.tensors[name]
            continue
        parts = {p: payload.tensors.get(f"{name}{SEPARATOR}{p}") for p in PARTS[kind]}
        if any(v is None for v in parts.values()):
            raise ValueError(f"{payload.id}: {name} lacks one of its {kind} parts ({', '.join(PARTS[kind])})")
        shape = [int(s) for s in parts["shape"].tolist()]  # type: ignore[union-attr]
        count = math.prod(shape)
        if kind == "sparse":
            values, indices = parts["values"], parts["indices"].long()  # type: ignore[union-attr]
            assert values is not None
            if indices.numel() != values.numel() or (indices.numel() and not 0 <= int(indices.min()) <= int(
                    indices.max()) < count):
                raise ValueError(f"{payload.id}: {name}'s sparse indices do not fit its shape {shape}")
            flat = torch.zeros(count, dtype=torch.float32)
            flat[indices] = values.float()
        else:
            bits = int(bits_text)
            lo, hi = (float(v) for v in parts["range"].tolist())  # type: ignore[union-attr]
            codes = _unpack(parts["codes"].numpy(), bits, count)  # type: ignore[union-attr]
            if codes.size != count:
                raise ValueError(f"{payload.id}: {name} carries {codes.size} codes for {count} entries")
            flat = torch.from_numpy(lo + codes * ((hi - lo) / (2**bits - 1))).float()
        value = flat.view(shape)
        if relative == "change":
            if base is None or name not in base:
                raise ValueError(f"{payload.id}: {name} is a change, and its base is not known")
            value = (base[name].detach().cpu().double() + value.double()).to(base[name].dtype)
        out[name] = value
    # a reader's view, never sent or stored: it keeps the bytes the encoded message cost and says how it came
    return dataclasses.replace(payload.with_tensors(out), nbytes=payload.nbytes)
