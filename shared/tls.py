"""Mutual TLS between Attest's processes: a throwaway CA, per-service certificates, credentials.

Every service is identified by a URI SAN `spiffe://attest/<name>` in its certificate.
`make run`, `make demo` and the tests create a CA and the certificates at start-up with
`write_throwaway_pki`; a deployment mounts its own (cert-manager or a Secret) and names the files
in settings. Certificates also carry `DNS:<name>`, `DNS:localhost` and `IP:127.0.0.1`, so a
channel to `127.0.0.1:<port>` or to the Kubernetes service name verifies without overrides.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

IDENTITY_PREFIX = "spiffe://attest/"
CA_FILE_NAME = "ca.pem"
# Throwaway certificates outlive any run or test session by far, and expire on their own.
THROWAWAY_VALIDITY = datetime.timedelta(days=30)


class TlsConfigError(ValueError):
    """Certificate files that cannot be used (missing, unreadable); the message names the file."""


@dataclass(frozen=True)
class CertificateFiles:
    """Where one identity's PEM files are: the CA that signs every peer, its chain and its key."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def identity_uri(name: str) -> str:
    """The URI SAN that names the service `name`."""
    return f"{IDENTITY_PREFIX}{name}"


def identity_from_uri(uri: str) -> str | None:
    """The service name in an Attest identity URI, or None for any other URI."""
    if uri.startswith(IDENTITY_PREFIX) and len(uri) > len(IDENTITY_PREFIX):
        return uri[len(IDENTITY_PREFIX):]
    return None


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _validity() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    # A little back-dating tolerates small clock differences between processes and machines.
    return now - datetime.timedelta(minutes=5), now + THROWAWAY_VALIDITY


def _create_ca() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "attest throwaway CA")])
    not_before, not_after = _validity()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False, data_encipherment=False,
                          key_agreement=False, encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _create_leaf(
    name: str, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    not_before, not_after = _validity()
    sans: list[x509.GeneralName] = [
        x509.UniformResourceIdentifier(identity_uri(name)),
        x509.DNSName(name),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        # Every service is a server to its callers and a client of its downstreams.
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _write_private(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    """Write a private key readable by its owner only (created 0600, never briefly wider)."""
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o600)


def write_throwaway_pki(directory: Path, names: Iterable[str]) -> dict[str, CertificateFiles]:
    """Create a new CA and one certificate per name in `directory`: `ca.pem`, `<name>.pem`,
    `<name>-key.pem` (keys mode 0600, the directory 0700). The CA's key is never written: nothing
    can be signed later."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    if directory.stat().st_uid == os.getuid():  # a mount point owned by someone else stays as it is
        directory.chmod(0o700)
    ca_cert, ca_key = _create_ca()
    ca_file = directory / CA_FILE_NAME
    ca_file.write_bytes(_pem(ca_cert))
    files: dict[str, CertificateFiles] = {}
    for name in names:
        cert, key = _create_leaf(name, ca_cert, ca_key)
        cert_file = directory / f"{name}.pem"
        key_file = directory / f"{name}-key.pem"
        cert_file.write_bytes(_pem(cert))
        _write_private(key_file, key)
        files[name] = CertificateFiles(ca_file=ca_file, cert_file=cert_file, key_file=key_file)
    return files


def certificate_files(directory: Path, name: str) -> CertificateFiles:
    """The files `write_throwaway_pki` wrote for `name` in `directory`."""
    return CertificateFiles(
        ca_file=directory / CA_FILE_NAME,
        cert_file=directory / f"{name}.pem",
        key_file=directory / f"{name}-key.pem",
    )


def read_pem(path: str | Path, what: str) -> bytes:
    """The bytes of a PEM file, or TlsConfigError naming the file and what it was for."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise TlsConfigError(f"the {what} {path} is not a PEM file")
    return data


def server_credentials(
    cert_file: str | Path, key_file: str | Path, client_ca_file: str | Path | None
) -> grpc.ServerCredentials:
    """TLS for a listening port; with `client_ca_file`, every client must present a certificate
    signed by that CA (mutual TLS), else no client certificate is asked for."""
    pair = (read_pem(key_file, "private key"), read_pem(cert_file, "certificate"))
    if client_ca_file is None:
        return grpc.ssl_server_credentials([pair])
    return grpc.ssl_server_credentials(
        [pair], root_certificates=read_pem(client_ca_file, "CA certificate"), require_client_auth=True
    )


def channel_credentials(
    ca_file: str | Path, cert_file: str | Path | None = None, key_file: str | Path | None = None
) -> grpc.ChannelCredentials:
    """TLS for a client: the server must be signed by `ca_file`; with a certificate and key, the
    client presents them (its identity)."""
    root = read_pem(ca_file, "CA certificate")
    if cert_file is None or key_file is None:
        return grpc.ssl_channel_credentials(root_certificates=root)
    return grpc.ssl_channel_credentials(
        root_certificates=root,
        private_key=read_pem(key_file, "private key"),
        certificate_chain=read_pem(cert_file, "certificate"),
    )


def files_channel_credentials(files: CertificateFiles) -> grpc.ChannelCredentials:
    """Client credentials presenting the identity whose files these are."""
    return channel_credentials(files.ca_file, files.cert_file, files.key_file)


def main(argv: list[str] | None = None) -> int:
    """`python -m shared.tls DIR NAME...`: a throwaway CA and certificates for NAMEs in DIR,
    unless DIR already holds a CA (so that restarting one container keeps every peer's CA)."""
    parser = argparse.ArgumentParser(prog="python -m shared.tls", description=main.__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("names", nargs="+")
    args = parser.parse_args(argv)
    if (args.directory / CA_FILE_NAME).exists():
        print(f"{args.directory}: certificates already present, kept")
        return 0
    write_throwaway_pki(args.directory, args.names)
    print(f"{args.directory}: CA and certificates for {', '.join(args.names)} written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
