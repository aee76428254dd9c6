"""A container health probe that needs no extra binary: `python -m shared.health_probe [--plaintext] [HOST:PORT]`.

Asks grpc.health.v1.Health/Check (overall server status) and exits 0 only on SERVING. Without an
address it probes the process this container runs, on 127.0.0.1: its plaintext health-only port
when `ATTEST_HEALTH_PORT` is set, else its service port (the role is read from PID 1's command
line, `python -m services.planner` → planner, its port from `ATTEST_<ROLE>_PORT` or the default in
`shared.config.DEFAULT_PORTS`). The service port is probed over mutual TLS with the container's
own certificate when `ATTEST_TLS_*` are set (the caller check lets any Attest identity ask for
health), in plaintext otherwise or with `--plaintext`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.config import DEFAULT_PORTS, CommonSettings
from shared.tls import TlsConfigError, channel_credentials


@dataclass(frozen=True)
class ProbeTarget:
    addr: str
    credentials: grpc.ChannelCredentials | None = None


def role_from_cmdline(argv: list[str]) -> str:
    """The role a `python -m <module>` command line runs; "gateway" when it is not recognisable."""
    if "-m" in argv and argv.index("-m") + 1 < len(argv):
        role = argv[argv.index("-m") + 1].rsplit(".", 1)[-1]
        if role in DEFAULT_PORTS:
            return role
    return "gateway"


def default_addr() -> str:
    """127.0.0.1 and the service port of the role PID 1 runs."""
    try:
        argv = Path("/proc/1/cmdline").read_bytes().decode().split("\0")
    except OSError:
        argv = []
    role = role_from_cmdline(argv)
    port = os.environ.get(f"ATTEST_{role.upper()}_PORT") or str(DEFAULT_PORTS[role])
    return f"127.0.0.1:{port}"


def own_credentials(settings: CommonSettings) -> grpc.ChannelCredentials | None:
    """This container's certificate as client credentials, or None when none is configured."""
    if not (settings.tls_ca_file and settings.tls_cert_file and settings.tls_key_file):
        return None
    return channel_credentials(settings.tls_ca_file, settings.tls_cert_file, settings.tls_key_file)


def probe_target(addr: str | None, plaintext: bool, settings: CommonSettings) -> ProbeTarget:
    """Where and how to probe: an explicit address, else the health port, else the service port."""
    if addr is None and settings.health_port:
        return ProbeTarget(f"127.0.0.1:{settings.health_port}")
    target = addr or default_addr()
    return ProbeTarget(target, None if plaintext else own_credentials(settings))


def check(addr: str, timeout: float = 3.0, credentials: grpc.ChannelCredentials | None = None) -> bool:
    """True when the server at `addr` reports SERVING within `timeout` seconds."""
    channel = grpc.secure_channel(addr, credentials) if credentials is not None else grpc.insecure_channel(addr)
    with channel:
        # types-grpcio-health-checking declares HealthStub without the methods the generated
        # class sets in __init__: the stub is wrong, the call is what grpc generates.
        check_call: grpc.UnaryUnaryMultiCallable[health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse] = (
            health_pb2_grpc.HealthStub(channel).Check  # type: ignore[attr-defined]
        )
        try:
            response = check_call(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError:
            return False
    return response.status == health_pb2.HealthCheckResponse.SERVING


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    plaintext = "--plaintext" in args
    positional = [arg for arg in args if arg != "--plaintext"]
    try:
        target = probe_target(positional[0] if positional else None, plaintext, CommonSettings())
    except TlsConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    healthy = check(target.addr, credentials=target.credentials)
    print(f"{target.addr}: {'SERVING' if healthy else 'NOT SERVING'}")
    return 0 if healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
