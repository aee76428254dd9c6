"""How a process's ports and channels are secured, decided from its settings in one place.

- A role listens with mutual TLS and accepts only the identities in `allowed_callers`.
- The gateway reaches the roles with its own certificate, and accepts on each role's address only
  a server whose certificate names that role (`role_tls_name`); its public port is plaintext (callers
  authenticate with bearer tokens) unless a public certificate is configured, optionally with a
  client CA that frontends' certificates must be signed by.
- Plaintext between services only with ATTEST_INSECURE=1; a process with neither certificates nor
  that setting refuses to start (`TransportNotConfigured`, one line for stderr).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from shared.config import CommonSettings, GatewaySettings, ServiceSettings
from shared.tls import CertificateFiles, TlsConfigError, channel_credentials, server_credentials

_TLS_VARS = ("ATTEST_TLS_CA_FILE", "ATTEST_TLS_CERT_FILE", "ATTEST_TLS_KEY_FILE")


class TransportNotConfigured(TlsConfigError):
    """Neither certificates nor ATTEST_INSECURE=1, or only some of the certificate files."""


@dataclass(frozen=True)
class ServerTransport:
    """How a server's port is secured: TLS credentials (None: plaintext) and, for mutual TLS,
    the identities allowed to call (None: no identity check)."""

    credentials: grpc.ServerCredentials | None = None
    allowed_callers: frozenset[str] | None = None
    description: str = "plaintext"


PLAINTEXT = ServerTransport()


def own_certificate(settings: CommonSettings) -> CertificateFiles | None:
    """The process's CA, certificate and key; None when plaintext is explicitly allowed and no
    certificate is configured. Raises TransportNotConfigured otherwise."""
    values = (settings.tls_ca_file, settings.tls_cert_file, settings.tls_key_file)
    if all(values):
        ca, cert, key = (str(value) for value in values)
        return CertificateFiles(ca_file=Path(ca), cert_file=Path(cert), key_file=Path(key))
    if any(values):
        missing = [name for name, value in zip(_TLS_VARS, values) if not value]
        raise TransportNotConfigured(f"mutual TLS needs all three files; {', '.join(missing)} not set")
    if settings.insecure:
        return None
    raise TransportNotConfigured(
        f"no TLS certificate configured: set {', '.join(_TLS_VARS)}, or ATTEST_INSECURE=1 to run "
        "in plaintext (local development only)"
    )


def role_transport(settings: ServiceSettings) -> ServerTransport:
    """A role's port: mutual TLS admitting `settings.allowed_callers`, or plaintext when insecure."""
    files = own_certificate(settings)
    if files is None:
        return PLAINTEXT
    callers = frozenset(settings.allowed_callers)
    return ServerTransport(
        credentials=server_credentials(files.cert_file, files.key_file, files.ca_file),
        allowed_callers=callers,
        description=f"mutual TLS, callers: {', '.join(sorted(callers)) or 'none'}",
    )


def gateway_public_transport(settings: GatewaySettings) -> ServerTransport:
    """The gateway's public port. Also checks that the gateway can reach the roles securely."""
    own_certificate(settings)
    cert, key = settings.public_tls_cert_file, settings.public_tls_key_file
    if not cert and not key:
        if settings.public_tls_client_ca_file:
            raise TransportNotConfigured(
                "ATTEST_GATEWAY_PUBLIC_TLS_CLIENT_CA_FILE needs ATTEST_GATEWAY_PUBLIC_TLS_CERT_FILE and _KEY_FILE"
            )
        return PLAINTEXT
    if not cert or not key:
        raise TransportNotConfigured(
            "the gateway's public TLS needs both ATTEST_GATEWAY_PUBLIC_TLS_CERT_FILE and ATTEST_GATEWAY_PUBLIC_TLS_KEY_FILE"
        )
    client_ca = settings.public_tls_client_ca_file
    return ServerTransport(
        credentials=server_credentials(cert, key, client_ca),
        description="TLS with client certificates" if client_ca else "TLS",
    )


def role_tls_name(role: str) -> str:
    """The DNS name a role's certificate carries and no other role's: the gateway's channels
    require it of the server they reach (shared/channels.py), so a process holding another
    role's certificate, or any other identity the CA signed, is refused on a role's address.
    `shared.tls` issues it (`DNS:<name>`); a deployment's own certificates must carry it too
    (deploy/k8s/base/tls.yaml)."""
    return role


def client_credentials(settings: CommonSettings) -> grpc.ChannelCredentials | None:
    """Credentials for this process's channels to the roles (None: plaintext, ATTEST_INSECURE)."""
    files = own_certificate(settings)
    if files is None:
        return None
    return channel_credentials(files.ca_file, files.cert_file, files.key_file)
