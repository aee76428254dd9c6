"""The throwaway PKI (shared/tls.py) and how settings choose a transport (shared/transport_security.py)."""

from __future__ import annotations

import ipaddress
import os
import stat

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec

from shared.config import GatewaySettings, PlannerSettings
from shared.tls import (
    TlsConfigError,
    certificate_files,
    identity_from_uri,
    identity_uri,
    main,
    read_pem,
    write_throwaway_pki,
)
from shared.transport_security import (
    PLAINTEXT,
    TransportNotConfigured,
    client_credentials,
    gateway_public_transport,
    own_certificate,
    role_transport,
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """No ATTEST_ variable or `.env` from the developer's shell leaks into these tests."""
    for name in list(os.environ):
        if name.startswith("ATTEST_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    return directory, write_throwaway_pki(directory, ["gateway", "executor"])


def _load(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_files_are_named_per_identity_and_keys_are_private(pki):
    directory, files = pki
    assert sorted(p.name for p in directory.iterdir()) == [
        "ca.pem", "executor-key.pem", "executor.pem", "gateway-key.pem", "gateway.pem"]
    assert files["executor"] == certificate_files(directory, "executor")
    for name in ("gateway", "executor"):
        assert stat.S_IMODE(files[name].key_file.stat().st_mode) == 0o600
    assert not any("ca-key" in p.name for p in directory.iterdir()), "the CA key is never written"


def test_certificate_carries_the_identity_and_loopback_names_and_is_signed_by_the_ca(pki):
    _, files = pki
    ca = _load(files["executor"].ca_file)
    cert = _load(files["executor"].cert_file)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.UniformResourceIdentifier) == ["spiffe://attest/executor"]
    assert set(sans.get_values_for_type(x509.DNSName)) == {"executor", "localhost"}
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.IPv4Address("127.0.0.1")]
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)  # raises when the signature does not verify
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_each_run_makes_a_new_ca(tmp_path):
    first = write_throwaway_pki(tmp_path / "a", ["gateway"])["gateway"]
    second = write_throwaway_pki(tmp_path / "b", ["gateway"])["gateway"]
    with pytest.raises(InvalidSignature):
        _load(second.cert_file).verify_directly_issued_by(_load(first.ca_file))


def test_identity_uris():
    assert identity_uri("gateway") == "spiffe://attest/gateway"
    assert identity_from_uri("spiffe://attest/gateway") == "gateway"
    assert identity_from_uri("spiffe://other/gateway") is None
    assert identity_from_uri("spiffe://attest/") is None


def test_unreadable_or_non_pem_files_are_named(tmp_path):
    with pytest.raises(TlsConfigError, match="cannot read the CA certificate .*missing.pem"):
        read_pem(tmp_path / "missing.pem", "CA certificate")
    junk = tmp_path / "junk.pem"
    junk.write_text("hello")
    with pytest.raises(TlsConfigError, match="junk.pem is not a PEM file"):
        read_pem(junk, "certificate")


def test_no_certificates_and_no_insecure_refuses_with_what_to_set():
    with pytest.raises(TransportNotConfigured) as info:
        role_transport(PlannerSettings())
    message = str(info.value)
    assert "ATTEST_TLS_CA_FILE" in message and "ATTEST_INSECURE=1" in message
    assert "\n" not in message


def test_insecure_is_plaintext_only_when_asked(monkeypatch):
    monkeypatch.setenv("ATTEST_INSECURE", "1")
    assert role_transport(PlannerSettings()) is PLAINTEXT
    assert client_credentials(PlannerSettings()) is None


def test_some_certificate_files_but_not_all_is_refused(pki):
    _, files = pki
    settings = PlannerSettings(tls_ca_file=str(files["executor"].ca_file), insecure=True)
    with pytest.raises(TransportNotConfigured, match="ATTEST_TLS_CERT_FILE, ATTEST_TLS_KEY_FILE not set"):
        own_certificate(settings)


def test_role_transport_admits_the_gateway_by_default_and_reads_the_callers(pki, monkeypatch):
    _, files = pki
    executor = files["executor"]
    monkeypatch.setenv("ATTEST_TLS_CA_FILE", str(executor.ca_file))
    monkeypatch.setenv("ATTEST_TLS_CERT_FILE", str(executor.cert_file))
    monkeypatch.setenv("ATTEST_TLS_KEY_FILE", str(executor.key_file))
    transport = role_transport(PlannerSettings())
    assert transport.credentials is not None and transport.allowed_callers == {"gateway"}
    monkeypatch.setenv("ATTEST_ALLOWED_CALLERS", "gateway, operator")
    assert role_transport(PlannerSettings()).allowed_callers == {"gateway", "operator"}


def test_gateway_public_port_is_plaintext_unless_a_certificate_is_given(pki, monkeypatch):
    _, files = pki
    gateway = files["gateway"]
    monkeypatch.setenv("ATTEST_INSECURE", "1")
    assert gateway_public_transport(GatewaySettings()) is PLAINTEXT
    monkeypatch.setenv("ATTEST_GATEWAY_PUBLIC_TLS_CERT_FILE", str(gateway.cert_file))
    with pytest.raises(TransportNotConfigured, match="both ATTEST_GATEWAY_PUBLIC_TLS_CERT_FILE"):
        gateway_public_transport(GatewaySettings())
    monkeypatch.setenv("ATTEST_GATEWAY_PUBLIC_TLS_KEY_FILE", str(gateway.key_file))
    transport = gateway_public_transport(GatewaySettings())
    assert transport.credentials is not None and transport.allowed_callers is None
    assert transport.description == "TLS"
    monkeypatch.setenv("ATTEST_GATEWAY_PUBLIC_TLS_CLIENT_CA_FILE", str(gateway.ca_file))
    assert gateway_public_transport(GatewaySettings()).description == "TLS with client certificates"


def test_gateway_without_certificates_for_the_roles_is_refused():
    with pytest.raises(TransportNotConfigured, match="ATTEST_INSECURE=1"):
        gateway_public_transport(GatewaySettings())


def test_the_cli_writes_certificates_once_and_keeps_them(tmp_path):
    directory = tmp_path / "tls"
    assert main([str(directory), "gateway", "planner"]) == 0
    first_ca = (directory / "ca.pem").read_bytes()
    assert {"gateway.pem", "gateway-key.pem", "planner.pem", "planner-key.pem"} <= {p.name for p in directory.iterdir()}
    assert main([str(directory), "gateway", "planner"]) == 0
    assert (directory / "ca.pem").read_bytes() == first_ca, "a restart keeps every peer's CA"
