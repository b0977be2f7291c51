"""SecAgg+'s key and share exchange (stages 0, 1 and 3 of Bell et al.'s protocol and the receiving side of stage 2):
each member's keys and what it was told, and the messages the server relays between members."""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import torch

from privbench.defenses.secure_aggregation.crypto import decrypt, encrypt, key_pair, shared_key
from privbench.defenses.secure_aggregation.shamir import create_shares
from privbench.fl.protocols.round import Upload
from privbench.fl.wire import Wire
from privbench.payloads import Payload

#: Sends one protocol message on the wire: (kind, sender, receiver, tensors) -> the payload as sent.
Send = Callable[[str, str, str, dict[str, torch.Tensor]], Payload]
SEED_BYTES = 32


def as_u8(data: bytes) -> torch.Tensor:
    """Bytes as a uint8 tensor (how keys and ciphertexts travel)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()


def as_bytes(t: torch.Tensor) -> bytes:
    """A uint8 tensor's bytes."""
    return bytes(t.to(torch.uint8).numpy().tobytes())


@dataclass
class Member:
    """One client's side of the protocol: its keys and what it was told (kept by the client, never sent)."""

    name: str
    upload: Upload
    sk1: bytes = b""
    pk1: bytes = b""
    sk2: bytes = b""
    pk2: bytes = b""
    seed: bytes = b""
    download: bytes = b""  # the digest of the model it received (``agreed_download``), kept by the member
    neighbours: dict[str, tuple[bytes, bytes]] = field(default_factory=dict)
    seed_shares: dict[str, bytes] = field(default_factory=dict)
    key_shares: dict[str, bytes] = field(default_factory=dict)


def sender(wire: Wire, *, round_: int, group: int | None) -> Send:
    """The ``Send`` of one cohort's run of the protocol."""
    def send(kind: str, src: str, dst: str, tensors: dict[str, torch.Tensor]) -> Payload:
        return wire.send(Payload.from_tensors(kind=kind, round=round_, sender=src, receiver=dst, tensors=tensors,
                                              cluster=group))
    return send


def digest(state: Mapping[str, torch.Tensor]) -> bytes:
    """SHA-256 of a model's state (names, dtypes, shapes and values, in name order): what a member says it received."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.numpy().tobytes())
    return h.digest()


def advertise_keys(members: Iterable[Member], send: Send, digests: Mapping[str, bytes] | None = None
                   ) -> dict[str, tuple[bytes, ...]]:
    """Stage 0: each member makes its two key pairs and sends the public keys (with ``digests``, also the digest of
    the model it received); the server's copy of them."""
    public: dict[str, tuple[bytes, ...]] = {}
    for m in members:
        (m.sk1, m.pk1), (m.sk2, m.pk2) = key_pair(), key_pair()
        tensors = {"pk1": as_u8(m.pk1), "pk2": as_u8(m.pk2)}
        if digests is not None:
            m.download = digests[m.name]
            tensors["download"] = as_u8(m.download)
        sent = send("secagg_public_keys", m.name, "server", tensors)
        assert sent.tensors is not None
        public[m.name] = tuple(as_bytes(sent.tensors[k]) for k in tensors)
    return public


def share_keys(members: Iterable[Member], ring: dict[str, list[str]], public: dict[str, tuple[bytes, ...]],
               threshold: int, send: Send) -> tuple[dict[str, dict[str, torch.Tensor]], list[str]]:
    """Stage 1: each member receives its neighbours' keys, draws its mask seed and sends Shamir shares of the seed
    and of its first secret key, each encrypted to its neighbour; what the server forwards to each member. Where the
    keys carry download digests, a member whose neighbour received another model abandons the round (returned:
    the members that did, in which case no share is sent)."""
    members = list(members)
    forwarded: dict[str, dict[str, torch.Tensor]] = {m.name: {} for m in members}
    fields, abandoned = ("pk1", "pk2", "download")[: len(next(iter(public.values())))], []
    for m in members:
        down = send("secagg_neighbour_keys", "server", m.name,
                    {f"{v}.{k}": as_u8(public[v][i]) for v in ring[m.name] for i, k in enumerate(fields)})
        assert down.tensors is not None
        m.neighbours = {v: (as_bytes(down.tensors[f"{v}.pk1"]), as_bytes(down.tensors[f"{v}.pk2"]))
                        for v in ring[m.name]}
        check_keys(m)
        if "download" in fields and {as_bytes(down.tensors[f"{v}.download"]) for v in ring[m.name]} != {m.download}:
            abandoned.append(m.name)  # a neighbour (or itself) received another model: it sends no shares
            continue
        m.seed = os.urandom(SEED_BYTES)
        seed_shares = create_shares(m.seed, threshold, len(m.neighbours))
        key_shares = create_shares(m.sk1, threshold, len(m.neighbours))
        ciphertexts = {}
        for i, (v, (_, pk2)) in enumerate(sorted(m.neighbours.items())):
            if v == m.name:
                m.seed_shares[v], m.key_shares[v] = seed_shares[i], key_shares[i]
                continue
            plain = frame(m.name, v, seed_shares[i], key_shares[i])
            ciphertexts[f"to.{v}"] = as_u8(encrypt(shared_key(m.sk2, pk2, purpose=b"shares"), plain))
        up = send("secagg_key_shares", m.name, "server", ciphertexts)
        assert up.tensors is not None
        for key, ct in up.tensors.items():
            forwarded[key.removeprefix("to.")][f"from.{m.name}"] = ct
    return forwarded, abandoned


def receive_shares(m: Member, forwarded: dict[str, torch.Tensor]) -> None:
    """Stage 2, the member's side: decrypt the shares forwarded to ``m``, refusing any not from a neighbour or
    addressed to another."""
    for key, ct in forwarded.items():
        src = key.removeprefix("from.")
        if src not in m.neighbours or src == m.name:
            raise ValueError(f"secagg: {m.name} was forwarded shares from {src}, not a neighbour")
        _, pk2 = m.neighbours[src]
        frame_src, frame_dst, seed_share, key_share = unframe(decrypt(shared_key(m.sk2, pk2, purpose=b"shares"),
                                                                      as_bytes(ct)))
        if (frame_src, frame_dst) != (src, m.name):
            raise ValueError(f"secagg: {m.name} received shares addressed {frame_src} -> {frame_dst}")
        m.seed_shares[src], m.key_shares[src] = seed_share, key_share


def unmask_shares(members: Iterable[Member], send: Send) -> dict[str, list[bytes]]:
    """Stage 3 (every client survived): each member sends its shares of its neighbours' seeds; the shares the
    server collected of each member's seed."""
    members = list(members)
    alive = torch.tensor(sorted(int(m.name.removeprefix("client")) for m in members if m.name.startswith("client")))
    collected: dict[str, list[bytes]] = {m.name: [] for m in members}
    for m in members:
        send("secagg_unmask_request", "server", m.name, {"survivors": alive})
        up = send("secagg_unmask_shares", m.name, "server",
                  {f"{v}.seed": as_u8(m.seed_shares[v]) for v in sorted(m.neighbours)})
        assert up.tensors is not None
        for key, share in up.tensors.items():
            collected[key.removesuffix(".seed")].append(as_bytes(share))
    return collected


def check_keys(m: Member) -> None:
    """A client refuses a neighbour list without its own keys, or with a key used twice."""
    if m.neighbours.get(m.name) != (m.pk1, m.pk2):
        raise ValueError(f"secagg: {m.name}'s own public keys are not among its neighbours' as sent")
    keys = [k for pair in m.neighbours.values() for k in pair]
    if len(set(keys)) != len(keys):
        raise ValueError(f"secagg: {m.name} received a public key twice")


def frame(src: str, dst: str, seed_share: bytes, key_share: bytes) -> bytes:
    """Two shares addressed ``src > dst``, as one plaintext."""
    head = f"{src}>{dst}".encode()
    return len(head).to_bytes(2, "big") + head + len(seed_share).to_bytes(2, "big") + seed_share + key_share


def unframe(data: bytes) -> tuple[str, str, bytes, bytes]:
    """``frame``'s fields back."""
    n = int.from_bytes(data[:2], "big")
    src, dst = data[2: 2 + n].decode().split(">")
    k = int.from_bytes(data[2 + n: 4 + n], "big")
    return src, dst, data[4 + n: 4 + n + k], data[4 + n + k:]
