"""The key material of SecAgg+: X25519 key agreement, HKDF-SHA256 keys, AES-GCM for the shares, PRG masks.

Each client holds two X25519 key pairs: the first agrees the pairwise mask seeds with its neighbours, the
second the keys that encrypt the secret shares the server forwards. Masks are drawn from a seed of 256 bits
(numpy's PCG64 seeded through ``SeedSequence`` with every bit of it) as integers mod ``2^bits``.
"""
from __future__ import annotations

import os

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

KEY_BYTES = 32
NONCE_BYTES = 12


def key_pair() -> tuple[bytes, bytes]:
    """A fresh X25519 key pair (private, public), 32 raw bytes each."""
    private = X25519PrivateKey.generate()
    return (private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()),
            private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def shared_key(private: bytes, public: bytes, *, purpose: bytes) -> bytes:
    """The 32-byte key two parties agree on (X25519, then HKDF-SHA256 with ``purpose`` as its info)."""
    secret = X25519PrivateKey.from_private_bytes(private).exchange(X25519PublicKey.from_public_bytes(public))
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=b"privbench secagg+ " + purpose
                ).derive(secret)


def encrypt(key: bytes, plaintext: bytes) -> bytes:
    """AES-256-GCM: a random nonce, then the ciphertext with its tag."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, None)


def decrypt(key: bytes, ciphertext: bytes) -> bytes:
    """The plaintext of ``encrypt``; raises ``ValueError`` when the ciphertext was altered or the key is wrong."""
    from cryptography.exceptions import InvalidTag

    try:
        return AESGCM(key).decrypt(ciphertext[:NONCE_BYTES], ciphertext[NONCE_BYTES:], None)
    except InvalidTag:
        raise ValueError("a share's ciphertext fails its authentication tag (altered, or not for this client)") from None


def mask(seed: bytes, size: int, modulus: int) -> np.ndarray:
    """``size`` integers uniform in ``[0, modulus)`` from ``seed`` (int64); both ends of a pair draw the same."""
    generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence(int.from_bytes(seed, "little"))))
    return generator.integers(0, modulus, size=size, dtype=np.int64)
