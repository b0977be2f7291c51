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
#: Quantisation widths a message may declare (``quantized:<bits>``): 2^bits - 1 > 0 levels, packed in a byte or two.
BITS = range(1, 17)
#: Most entries one decoded tensor, and all of one payload's together, may declare when no base model gives their
#: shapes (2^28 float32s: 1 GiB); against a base, a payload decodes to at most the base's entries.
MAX_ENTRIES = 2**28
#: Most dimensions a declared shape may have.
MAX_DIMS = 8


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


def declared_shape(payload_id: str, name: str, shape: torch.Tensor, base: dict[str, torch.Tensor] | None) -> list[int]:
    """The shape a message declares for ``name``, checked before anything is allocated: the base model's shape of
    ``name`` (a name the base lacks is refused), or without a base at most ``MAX_DIMS`` non-negative sizes of at
    most ``MAX_ENTRIES`` entries.

    Raises:
        ValueError: a name outside the base, a shape that is not a list of sizes, or one that breaks its bound.
    """
    if shape.is_floating_point() or shape.is_complex() or shape.dim() != 1 or shape.numel() > MAX_DIMS:
        raise ValueError(f"{payload_id}: {name}'s declared shape is not a list of at most {MAX_DIMS} integer sizes")
    sizes = [int(s) for s in shape.tolist()]
    if base is not None:
        if name not in base:
            raise ValueError(f"{payload_id}: {name} is not one of the {len(base)} tensors of the model it is decoded "
                             f"against ({', '.join(sorted(base)[:3])}, ...); refused before decoding")
        if sizes != list(base[name].shape):
            raise ValueError(f"{payload_id}: {name} declares shape {sizes}, the model's is {list(base[name].shape)}")
        return sizes
    if any(s < 0 for s in sizes) or math.prod(sizes) > MAX_ENTRIES:
        raise ValueError(f"{payload_id}: {name} declares shape {sizes[:MAX_DIMS]}: sizes must be >= 0 and hold at most "
                         f"{MAX_ENTRIES:,} entries (2^28)")
    return sizes


def declared_range(payload_id: str, name: str, bounds: torch.Tensor) -> tuple[float, float]:
    """A quantised tensor's lowest and highest level: two finite numbers, the first not above the second."""
    values = bounds.double().flatten().tolist() if bounds.is_floating_point() and bounds.numel() == 2 else []
    if len(values) != 2 or not all(math.isfinite(v) for v in values) or values[0] > values[1]:
        raise ValueError(f"{payload_id}: {name}'s quantisation range {bounds.flatten().tolist()[:4]} is not two finite "
                         "numbers, lowest first")
    return values[0], values[1]


def _declared_shapes(payload: Payload, names: list[str], parts: tuple[str, ...],
                     base: dict[str, torch.Tensor] | None) -> dict[str, list[int]]:
    """Every encoded name's declared shape, all checked before any is decoded: each name has its ``parts`` and a
    shape within its bound (``declared_shape``), and together they hold at most the base's entries (without a base
    ``MAX_ENTRIES``)."""
    assert payload.tensors is not None
    limit = sum(t.numel() for t in base.values()) if base is not None else MAX_ENTRIES
    shapes: dict[str, list[int]] = {}
    total = 0
    for name in names:
        if any(f"{name}{SEPARATOR}{p}" not in payload.tensors for p in parts):
            raise ValueError(f"{payload.id}: {name} lacks one of its encoded parts ({', '.join(parts)})")
        shapes[name] = declared_shape(payload.id, name, payload.tensors[f"{name}{SEPARATOR}shape"], base)
        total += math.prod(shapes[name])
        if total > limit:
            raise ValueError(f"{payload.id}: with {name} it decodes to more than the {limit:,} entries one payload may "
                             f"hold ({'its base model' if base is not None else '2^28'}); refused before decoding")
    return shapes


def decode(payload: Payload, base: dict[str, torch.Tensor] | None) -> Payload:
    """The message as its reader uses it: every encoded tensor back at its name and shape (a change plus
    ``base``), its ``nbytes`` still the encoded message's; a payload without an encoding, or without its tensors,
    is returned as it is.

    Raises:
        ValueError: an encoded part is missing or inconsistent, names a tensor outside ``base``, would decode to
            more entries than ``base`` holds (``MAX_ENTRIES`` without one), or is a change with no base to add to.
    """
    if payload.encoding is None or payload.tensors is None:
        return payload
    scheme, _, relative = payload.encoding.partition("/")
    kind, _, bits_text = scheme.partition(":")
    if kind not in PARTS or relative not in ("change", "values"):
        raise ValueError(f"{payload.id}: unknown encoding {payload.encoding!r}")
    if kind == "quantized" and not (bits_text.isdigit() and int(bits_text) in BITS):
        raise ValueError(f"{payload.id}: encoding {payload.encoding!r} declares {bits_text or 'no'} bits; a quantised "
                         f"message has {BITS.start} to {BITS.stop - 1} bits (at least one level above zero)")
    out: dict[str, torch.Tensor] = {}
    names = list(dict.fromkeys(plain_name(n) for n in payload.tensors))
    shapes = _declared_shapes(payload, [n for n in names if n not in payload.tensors], PARTS[kind], base)
    for name in names:
        if name in payload.tensors:
            out[name] = payload.tensors[name]
            continue
        parts = {p: payload.tensors[f"{name}{SEPARATOR}{p}"] for p in PARTS[kind]}
        shape = shapes[name]
        count = math.prod(shape)
        if kind == "sparse":
            values, indices = parts["values"], parts["indices"].long()
            if not values.is_floating_point() or not bool(torch.isfinite(values).all()):
                raise ValueError(f"{payload.id}: {name}'s sparse values are not finite floating-point numbers")
            if indices.numel() != values.numel() or (indices.numel() and not 0 <= int(indices.min()) <= int(
                    indices.max()) < count):
                raise ValueError(f"{payload.id}: {name}'s sparse indices do not fit its shape {shape}")
            flat = torch.zeros(count, dtype=torch.float32)
            flat[indices] = values.float()
        else:
            bits = int(bits_text)
            lo, hi = declared_range(payload.id, name, parts["range"])
            packed = parts["codes"]
            need = 2 * count if bits > 8 else math.ceil(count / (8 // bits))
            if packed.dtype != torch.uint8 or packed.dim() != 1 or packed.numel() != need:
                raise ValueError(f"{payload.id}: {name} carries {packed.numel()} bytes of {bits}-bit codes; its shape "
                                 f"{shape} needs {need} bytes (uint8, one-dimensional)")
            codes = _unpack(packed.numpy(), bits, count)
            flat = torch.from_numpy(lo + codes * ((hi - lo) / (2**bits - 1))).float()
        value = flat.view(shape)
        if relative == "change":
            if base is None or name not in base:
                raise ValueError(f"{payload.id}: {name} is a change, and its base is not known")
            value = (base[name].detach().cpu().double() + value.double()).to(base[name].dtype)
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{payload.id}: {name} decodes to NaN or infinite values")
        out[name] = value
    # a reader's view, never sent or stored: it keeps the bytes the encoded message cost and says how it came
    return dataclasses.replace(payload.with_tensors(out), nbytes=payload.nbytes)
