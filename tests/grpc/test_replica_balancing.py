"""Calls spread over a role's replicas: three real servers built as every role's is
(`build_server`, mutual TLS), reached through the gateway's kind of channel (`ChannelPool`) at one
`ipv4:` target listing all three, as the launcher gives it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from shared.channels import ChannelPool, IdempotentMethod, Keepalive
from shared.config import ServiceSettings
from shared.server import RunningServer, build_server
from shared.tls import certificate_files, files_channel_credentials, write_throwaway_pki
from shared.transport_security import role_transport

SERVICE = "attest.test.v1.WhoService"
WHO = f"/{SERVICE}/Who"
REPLICAS = 3


def _replica(tls_dir: Path, index: int) -> RunningServer:
    files = certificate_files(tls_dir, "executor")  # every replica of a role holds its certificate
    settings = ServiceSettings(port=0, tls_ca_file=str(files.ca_file), tls_cert_file=str(files.cert_file),
                               tls_key_file=str(files.key_file))

    def register(server: grpc.Server) -> None:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
            "Who": grpc.unary_unary_rpc_method_handler(lambda _request, _context: str(index).encode()),
        }),))

    return build_server(service_name="executor", settings=settings, register=register,
                        service_names=[SERVICE], transport=role_transport(settings))


@pytest.fixture()
def tls_dir(tmp_path) -> Path:
    write_throwaway_pki(tmp_path, ["executor", "gateway"])
    return tmp_path


@pytest.fixture()
def replicas(tls_dir) -> Iterator[list[RunningServer]]:
    running = [_replica(tls_dir, index) for index in range(REPLICAS)]
    try:
        yield running
    finally:
        for server in running:
            server.stop(None)


@pytest.fixture()
def who(tls_dir, replicas):
    """Ask `who` through the gateway's channel to `ipv4:127.0.0.1:p1,…`; returns the replica index."""
    pool = ChannelPool(credentials=files_channel_credentials(certificate_files(tls_dir, "gateway")),
                       keepalive=Keepalive())
    target = "ipv4:" + ",".join(f"127.0.0.1:{server.port}" for server in replicas)
    call = pool.get(target).unary_unary(WHO)
    ask = lambda: int(call(b"", timeout=10))  # noqa: E731
    # The channel is ready once one replica is; the others finish their handshakes meanwhile.
    seen: set[int] = set()
    for _ in range(200):
        seen.add(ask())
        if len(seen) == REPLICAS:
            break
    assert len(seen) == REPLICAS, f"only replicas {seen} answered while connecting"
    try:
        yield ask
    finally:
        pool.close()


def test_calls_spread_over_every_replica_not_one_connection(who) -> None:
    answered = Counter(who() for _ in range(30))
    assert set(answered) == set(range(REPLICAS)), answered
    assert min(answered.values()) >= 5, answered  # round robin, not a pinned connection


def test_a_replica_gone_is_skipped_and_no_call_fails(who, replicas) -> None:
    replicas[1].server.stop(None).wait()  # its port closes: calls picked for it never reach it
    answered = Counter(who() for _ in range(30))  # none raises
    assert set(answered) == {0, 2}, answered


class _FlakyOnce:
    """A method whose first call fails UNAVAILABLE, as a replica lost mid-call does."""

    def __init__(self) -> None:
        self.calls = 0

    def handle(self, _request: bytes, context: grpc.ServicerContext) -> bytes:
        self.calls += 1
        if self.calls == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "replica going away")
        return b"ok"


@pytest.mark.parametrize("idempotent", [True, False])
def test_only_an_idempotent_method_is_made_again_after_unavailable(tls_dir, idempotent) -> None:
    flaky = _FlakyOnce()
    files = certificate_files(tls_dir, "executor")
    settings = ServiceSettings(port=0, tls_ca_file=str(files.ca_file), tls_cert_file=str(files.cert_file),
                               tls_key_file=str(files.key_file))
    running = build_server(service_name="executor", settings=settings, service_names=[SERVICE],
                           register=lambda server: server.add_generic_rpc_handlers((
                               grpc.method_handlers_generic_handler(SERVICE, {
                                   "Who": grpc.unary_unary_rpc_method_handler(flaky.handle)}),)),
                           transport=role_transport(settings))
    pool = ChannelPool(credentials=files_channel_credentials(certificate_files(tls_dir, "gateway")),
                       idempotent=(IdempotentMethod(SERVICE, "Who"),) if idempotent else ())
    try:
        call = pool.get(f"127.0.0.1:{running.port}").unary_unary(WHO)
        if idempotent:
            assert call(b"", timeout=10) == b"ok" and flaky.calls == 2
        else:
            with pytest.raises(grpc.RpcError) as failed:
                call(b"", timeout=10)
            assert failed.value.code() == grpc.StatusCode.UNAVAILABLE and flaky.calls == 1
    finally:
        pool.close()
        running.stop(None)
