"""TLS certificates and SuperNode keys for a Flower deployment that is not ``--insecure``.

``python -m privbench.flower.certificates DIR --nodes N`` writes, into a new folder ``DIR``:

- ``ca.crt``: a certificate authority made for this federation (its key is not kept, so it signs
  nothing after this command);
- ``server.crt`` and ``server.key``: the SuperLink's TLS certificate, signed by that CA, for the
  host names and addresses given (default ``127.0.0.1`` and ``localhost``);
- ``node-<i>`` and ``node-<i>.pub``: each SuperNode's P-384 key pair in OpenSSH form (the private
  key for ``flower-supernode --auth-supernode-private-key``, the public one for
  ``flwr supernode register``).

Private keys get mode 0600. ``docs/flower.md`` shows the deployment that uses them.
"""
from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: The most SuperNode key pairs one command writes.
MAX_NODES = 10_000


@dataclass(frozen=True)
class Federation:
    """The files a TLS deployment with authenticated SuperNodes reads."""

    ca: Path
    server_certificate: Path
    server_key: Path
    node_keys: tuple[Path, ...]

    @property
    def node_public_keys(self) -> tuple[Path, ...]:
        return tuple(k.with_name(k.name + ".pub") for k in self.node_keys)


def _write(path: Path, data: bytes, *, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "privbench federation"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _alt_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def make_federation(folder: Path, *, nodes: int, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
                    days: int = 30) -> Federation:
    """Write a CA, the SuperLink's certificate for ``hosts`` and ``nodes`` SuperNode key pairs into a new ``folder``."""
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"nodes={nodes}: allowed 1 to {MAX_NODES}")
    if not hosts:
        raise ValueError("hosts: give at least one host name or address for the SuperLink's certificate")
    folder.mkdir(parents=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = _name("privbench federation CA")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA384()))

    server_key = ec.generate_private_key(ec.SECP384R1())
    server = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca_name)
              .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(start).not_valid_after(end)
              .add_extension(x509.SubjectAlternativeName([_alt_name(h) for h in hosts]), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA384()))

    pem = serialization.Encoding.PEM
    _write(folder / "ca.crt", ca.public_bytes(pem), private=False)
    _write(folder / "server.crt", server.public_bytes(pem), private=False)
    _write(folder / "server.key", server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()), private=True)
    node_keys = []
    for i in range(nodes):
        key = ec.generate_private_key(ec.SECP384R1())
        path = folder / f"node-{i}"
        _write(path, key.private_bytes(pem, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()),
               private=True)
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        _write(path.with_name(path.name + ".pub"), public + f" privbench-node-{i}\n".encode(), private=False)
        node_keys.append(path)
    return Federation(folder / "ca.crt", folder / "server.crt", folder / "server.key", tuple(node_keys))


def main(argv: list[str] | None = None) -> None:
    """``python -m privbench.flower.certificates DIR --nodes N [--host H ...] [--days D]``."""
    parser = argparse.ArgumentParser(prog="python -m privbench.flower.certificates",
                                     description="TLS certificates and SuperNode keys for a Flower deployment.")
    parser.add_argument("folder", type=Path, help="a new folder for the files")
    parser.add_argument("--nodes", type=int, required=True, help="SuperNode key pairs to write (one per client)")
    parser.add_argument("--host", action="append", dest="hosts",
                        help="a host name or address the SuperLink is reached at (repeat; default 127.0.0.1 "
                             "and localhost)")
    parser.add_argument("--days", type=int, default=30, help="how long the certificates are valid (default 30)")
    args = parser.parse_args(argv)
    if args.folder.exists():
        parser.exit(2, f"privbench: error: {args.folder}: already exists; give a new folder\n")
    if not 1 <= args.days <= 3650:
        parser.exit(2, f"privbench: error: --days={args.days}: allowed 1 to 3650\n")
    try:
        made = make_federation(args.folder, nodes=args.nodes, hosts=tuple(args.hosts or ("127.0.0.1", "localhost")),
                               days=args.days)
    except ValueError as exc:
        parser.exit(2, f"privbench: error: {exc}\n")
    print(f"wrote {made.ca.name}, {made.server_certificate.name}, {made.server_key.name} and {len(made.node_keys)} "
          f"SuperNode key pairs (node-0 ... node-{len(made.node_keys) - 1}) to {args.folder}", file=sys.stdout)


if __name__ == "__main__":
    main()
