"""Mutual TLS on a real server built as every role's is (`build_server` with `role_transport`):
who gets in, what grpcio tells the server about the peer, the plaintext health-only port,
reflection v1, and the health probe over TLS."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.config import GatewaySettings, ServiceSettings
from shared.health_probe import check, main, own_credentials
from shared.peer_identity import PEER_URI_KEY
from shared.reflection_v1 import V1_SERVICE_NAME, v1_file_descriptor
from shared.server import RunningServer, build_server
from shared.tls import certificate_files, channel_credentials, files_channel_credentials, write_throwaway_pki
from shared.transport_security import gateway_public_transport, role_transport

SERVICE = "attest.test.v1.EchoService"
ECHO = f"/{SERVICE}/Echo"
IDENTITIES = ("executor", "gateway", "intruder")


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    write_throwaway_pki(directory, IDENTITIES)
    # A second CA with a "gateway" of its own: same name, wrong signer.
    write_throwaway_pki(directory / "other-ca", ["gateway"])
    return directory


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _settings(tls_dir: Path, **extra: Any) -> ServiceSettings:
    files = certificate_files(tls_dir, "executor")
    return ServiceSettings(port=0, tls_ca_file=str(files.ca_file), tls_cert_file=str(files.cert_file),
                           tls_key_file=str(files.key_file), **extra)


class _Echo:
    """A one-method service answering with the caller's auth context (what the interceptor reads)."""

    def __init__(self) -> None:
        self.auth_context: dict[str, Any] = {}

    def echo(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self.auth_context = dict(context.auth_context())
        return request

    def register(self, server: grpc.Server) -> None:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
            "Echo": grpc.unary_unary_rpc_method_handler(self.echo),
        }),))


@pytest.fixture(scope="module")
def echo() -> _Echo:
    return _Echo()


@pytest.fixture(scope="module")
def role(tls_dir, echo) -> Iterator[RunningServer]:
    settings = _settings(tls_dir, health_port=_free_port())
    running = build_server(service_name="executor", settings=settings, register=echo.register,
                           service_names=[SERVICE], transport=role_transport(settings))
    try:
        yield running
    finally:
        running.stop(None)


def _channel(role: RunningServer, credentials: grpc.ChannelCredentials | None) -> grpc.Channel:
    addr = f"127.0.0.1:{role.port}"
    return grpc.secure_channel(addr, credentials) if credentials else grpc.insecure_channel(addr)


def _as(tls_dir: Path, identity: str) -> grpc.ChannelCredentials:
    return files_channel_credentials(certificate_files(tls_dir, identity))


def _echo(channel: grpc.Channel) -> bytes:
    return channel.unary_unary(ECHO)(b"ping", timeout=5)


def _health(channel: grpc.Channel, service: str = "") -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def test_the_gateway_identity_is_admitted_and_read_from_the_uri_san(role, tls_dir, echo):
    with _channel(role, _as(tls_dir, "gateway")) as channel:
        assert _echo(channel) == b"ping"
    # grpcio 1.85 puts URI SANs (only) under peer_uri; x509_subject_alternative_name mixes them
    # with DNS names and addresses.
    assert echo.auth_context[PEER_URI_KEY] == [b"spiffe://attest/gateway"]
    assert b"spiffe://attest/gateway" in echo.auth_context["x509_subject_alternative_name"]
    assert b"localhost" in echo.auth_context["x509_subject_alternative_name"]


def test_a_certificate_of_the_same_ca_but_another_identity_is_permission_denied(role, tls_dir):
    with _channel(role, _as(tls_dir, "intruder")) as channel:
        with pytest.raises(grpc.RpcError) as info:
            _echo(channel)
        # Health stays open to any authenticated peer (probes, operators).
        assert _health(channel) == health_pb2.HealthCheckResponse.SERVING
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "intruder may not call the executor" in info.value.details()
    assert "allowed callers: gateway" in info.value.details()


@pytest.mark.parametrize("who", ["no client certificate", "a gateway certificate from another CA", "plaintext"])
def test_callers_without_a_valid_client_certificate_cannot_talk_at_all(role, tls_dir, who):
    credentials = {
        "no client certificate": channel_credentials(certificate_files(tls_dir, "gateway").ca_file),
        "a gateway certificate from another CA": channel_credentials(
            tls_dir / "ca.pem", tls_dir / "other-ca" / "gateway.pem", tls_dir / "other-ca" / "gateway-key.pem"),
        "plaintext": None,
    }[who]
    with _channel(role, credentials) as channel:
        with pytest.raises(grpc.RpcError) as echo_info:
            _echo(channel)
        with pytest.raises(grpc.RpcError) as health_info:
            _health(channel)
    assert echo_info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert health_info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_the_health_port_answers_plaintext_and_serves_nothing_else(role):
    with grpc.insecure_channel(f"127.0.0.1:{role.health_port}") as channel:
        assert _health(channel) == health_pb2.HealthCheckResponse.SERVING
        assert _health(channel, SERVICE) == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as echo_info:
            _echo(channel)
        with pytest.raises(grpc.RpcError) as reflection_info:
            list(_reflection_v1(channel, list_services=""))
    assert echo_info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert reflection_info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def _v1_class(name: str) -> Any:
    v1_file_descriptor()
    return message_factory.GetMessageClass(descriptor_pool.Default().FindMessageTypeByName(f"grpc.reflection.v1.{name}"))


def _reflection_v1(channel: grpc.Channel, **request: str) -> Iterator[Any]:
    request_class, response_class = _v1_class("ServerReflectionRequest"), _v1_class("ServerReflectionResponse")
    call = channel.stream_stream(f"/{V1_SERVICE_NAME}/ServerReflectionInfo",
                                 request_serializer=request_class.SerializeToString,
                                 response_deserializer=response_class.FromString)
    return call(iter([request_class(**request)]), timeout=5)


def test_reflection_v1_lists_the_services_and_describes_itself(role, tls_dir):
    with _channel(role, _as(tls_dir, "intruder")) as channel:  # open to any authenticated peer
        (listing,) = _reflection_v1(channel, list_services="")
        (described,) = _reflection_v1(channel, file_containing_symbol=V1_SERVICE_NAME)
    names = {service.name for service in listing.list_services_response.service}
    assert {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"} <= names
    assert described.file_descriptor_response.file_descriptor_proto, "v1 describes its own file"


def test_health_probe_over_mutual_tls_and_on_the_health_port(role, tls_dir, monkeypatch):
    addr = f"127.0.0.1:{role.port}"
    settings = _settings(tls_dir)
    assert check(addr, credentials=own_credentials(settings))
    assert not check(addr), "plaintext cannot probe a TLS port"
    files = certificate_files(tls_dir, "executor")
    monkeypatch.setenv("ATTEST_TLS_CA_FILE", str(files.ca_file))
    monkeypatch.setenv("ATTEST_TLS_CERT_FILE", str(files.cert_file))
    monkeypatch.setenv("ATTEST_TLS_KEY_FILE", str(files.key_file))
    assert main([addr]) == 0  # the container's own certificate, read from its environment
    assert main(["--plaintext", f"127.0.0.1:{role.health_port}"]) == 0
    monkeypatch.setenv("ATTEST_HEALTH_PORT", str(role.health_port))
    monkeypatch.setenv("ATTEST_EXECUTOR_PORT", "1")  # would fail: the health port wins
    assert main([]) == 0


@pytest.mark.parametrize("client_ca", [False, True])
def test_the_gateway_public_port_with_tls_and_optional_client_certificates(tls_dir, echo, client_ca):
    gateway = certificate_files(tls_dir, "gateway")
    settings = GatewaySettings(
        port=0, insecure=True, public_tls_cert_file=str(gateway.cert_file), public_tls_key_file=str(gateway.key_file),
        public_tls_client_ca_file=str(gateway.ca_file) if client_ca else None)
    running = build_server(service_name="gateway", settings=settings, register=echo.register,
                           service_names=[SERVICE], transport=gateway_public_transport(settings))
    try:
        with _channel(running, channel_credentials(gateway.ca_file)) as anonymous:
            if client_ca:
                with pytest.raises(grpc.RpcError) as info:
                    _echo(anonymous)
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            else:
                assert _echo(anonymous) == b"ping", "frontends authenticate with bearer tokens"
        with _channel(running, _as(tls_dir, "intruder")) as frontend:
            assert _echo(frontend) == b"ping", "no identity check on the public port"
        with _channel(running, None) as plaintext, pytest.raises(grpc.RpcError):
            _echo(plaintext)
    finally:
        running.stop(None)
