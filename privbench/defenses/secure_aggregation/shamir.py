"""Shamir's t-of-n secret sharing (Shamir, 1979) of byte strings over the prime field GF(2^521 - 1).

A secret of at most 64 bytes is one field element; share ``i`` is the point ``(i, f(i))`` of a random polynomial
of degree ``t - 1`` with ``f(0)`` the secret. Any ``t`` shares give the secret back (Lagrange interpolation at 0);
fewer say nothing of it. Coefficients come from the operating system's randomness (``secrets``).
"""
from __future__ import annotations

import secrets
from collections.abc import Sequence

#: The Mersenne prime 2^521 - 1: every secret of up to 64 bytes is an element of its field.
PRIME = 2**521 - 1
#: Bytes of a field element, and of a share's index.
ELEMENT_BYTES, INDEX_BYTES = 66, 2
MAX_SECRET_BYTES = 64


def create_shares(secret: bytes, threshold: int, num_shares: int) -> list[bytes]:
    """Split ``secret`` into ``num_shares`` shares, any ``threshold`` of which rebuild it.

    Example:
        >>> shares = create_shares(b"key", 2, 3)
        >>> combine_shares(shares[1:]) == combine_shares(shares[:2]) == b"key"
        True
    """
    if not 1 <= threshold <= num_shares < 2 ** (8 * INDEX_BYTES):
        raise ValueError(f"need 1 <= threshold ({threshold}) <= shares ({num_shares}) < 65536")
    if not 1 <= len(secret) <= MAX_SECRET_BYTES:
        raise ValueError(f"a secret is 1 to {MAX_SECRET_BYTES} bytes, not {len(secret)}")
    # the length rides in the top byte so that leading zero bytes survive
    value = int.from_bytes(bytes([len(secret)]) + secret, "big")
    coefficients = [value] + [secrets.randbelow(PRIME) for _ in range(threshold - 1)]
    shares = []
    for x in range(1, num_shares + 1):
        y = 0
        for c in reversed(coefficients):
            y = (y * x + c) % PRIME
        shares.append(x.to_bytes(INDEX_BYTES, "big") + y.to_bytes(ELEMENT_BYTES, "big"))
    return shares


def combine_shares(shares: Sequence[bytes]) -> bytes:
    """The secret of ``shares`` (at least the threshold of them, distinct indices)."""
    points = []
    for s in shares:
        if len(s) != INDEX_BYTES + ELEMENT_BYTES:
            raise ValueError(f"a share is {INDEX_BYTES + ELEMENT_BYTES} bytes, not {len(s)}")
        points.append((int.from_bytes(s[:INDEX_BYTES], "big"), int.from_bytes(s[INDEX_BYTES:], "big")))
    xs = [x for x, _ in points]
    if len(set(xs)) != len(xs) or 0 in xs:
        raise ValueError("shares must have distinct, non-zero indices")
    value = 0
    for i, (xi, yi) in enumerate(points):
        num = den = 1
        for j, (xj, _) in enumerate(points):
            if i != j:
                num, den = num * -xj % PRIME, den * (xi - xj) % PRIME
        value = (value + yi * num * pow(den, -1, PRIME)) % PRIME
    raw = value.to_bytes(ELEMENT_BYTES, "big").lstrip(b"\0")
    if not raw or raw[0] != len(raw) - 1:
        raise ValueError("the shares do not rebuild a secret (too few, or not of one secret)")
    return raw[1:]
