"""Compressing uplink transforms that change what a message costs: top-k sparsification with indices, and
stochastic rounding to k bits (the message carries the encoded form; ``privbench.payloads.encoding``)."""
from __future__ import annotations

from typing import Annotated, Any

import torch

from privbench.defenses.transform import payload_generator
from privbench.errors import ConfigError
from privbench.payloads import Payload
from privbench.payloads.encoding import encode, quantized, sparse
from privbench.payloads.transform import MessageTransform
from privbench.schema import Fraction, Number


def _what(payload: Payload, base: dict[str, torch.Tensor] | None) -> tuple[bool, dict[str, torch.Tensor]]:
    """Whether the encoded tensors are a model upload's change, and those tensors (floating ones only)."""
    assert payload.tensors is not None
    relative = payload.spec.carries == "model" and base is not None
    out = {}
    for name, t in payload.tensors.items():
        if not t.is_floating_point():
            continue
        if relative:
            assert base is not None
            if name not in base:
                continue
            out[name] = t - base[name].to(t.device, t.dtype)
        else:
            out[name] = t
    return relative, out


class TopK(MessageTransform):
    """Send the top ``p`` fraction of each tensor (of a model upload's change) by magnitude, as values and int32
    indices (Aji and Heafield 2017; Lin et al.'s deep gradient compression without its error feedback).

    Example:
        >>> p = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server",
        ...                          tensors={"w": torch.arange(100.0)})
        >>> TopK(p=0.1).protect(p).nbytes  # 10 values, 10 indices, the shape
        88
    """

    name = "topk"
    encodes = True

    def __init__(self, *, p: Fraction = 0.1, seed: int = 0) -> None:
        if not 0 < p <= 1:
            raise ConfigError(f"defense.p must be in (0, 1], got {p}")
        self.p = p

    def protect(self, payload: Payload, base: dict[str, torch.Tensor] | None = None) -> Payload:
        if payload.spec.carries not in ("gradient", "model"):
            return payload
        relative, tensors = _what(payload, base)
        what = "change from the received model" if relative else "values"
        return encode(payload, {n: sparse(t, self.p) for n, t in tensors.items()}, scheme="sparse", relative=relative,
                      protection=f"sent the top {self.p:g} of each tensor's {what} by magnitude, with int32 indices")

    def describe(self) -> dict[str, Any]:
        return {"defense": self.name, "p": self.p, "encoding": "float32 values + int32 indices"}


class StochasticQuantization(MessageTransform):
    """Send each tensor (a model upload's change) stochastically rounded to ``2^bits`` levels between its minimum
    and maximum (unbiased; as in QSGD and TernGrad, one range per tensor), the levels packed.

    Example:
        >>> p = Payload.from_tensors(kind="gradient", round=0, sender="client0", receiver="server",
        ...                          tensors={"w": torch.arange(100.0)})
        >>> StochasticQuantization(bits=4).protect(p).nbytes  # 50 bytes of 4-bit codes, the range, the shape
        66
    """

    name = "quantize"
    encodes = True

    def __init__(self, *, bits: Annotated[int, Number(integer=True, low=1, high=16)] = 4, seed: int = 0) -> None:
        if isinstance(bits, bool) or not isinstance(bits, int) or bits not in (1, 2, 4, 8, 16):
            raise ConfigError(f"defense.bits={bits!r}: one of 1, 2, 4, 8, 16")
        self.bits, self.seed = bits, seed

    def protect(self, payload: Payload, base: dict[str, torch.Tensor] | None = None) -> Payload:
        if payload.spec.carries not in ("gradient", "model"):
            return payload
        relative, tensors = _what(payload, base)
        generator = payload_generator(self.seed, payload)
        what = "change from the received model" if relative else "values"
        return encode(payload, {n: quantized(t, self.bits, generator) for n, t in tensors.items()},
                      scheme=f"quantized:{self.bits}", relative=relative,
                      protection=f"stochastically rounded each tensor's {what} to {2 ** self.bits} levels")

    def describe(self) -> dict[str, Any]:
        return {"defense": self.name, "bits": self.bits, "encoding": f"{self.bits}-bit codes + a float32 range"}
