"""A container health probe that needs no extra binary: `python -m shared.health_probe [HOST:PORT]`.

Asks grpc.health.v1.Health/Check (overall server status) and exits 0 only on SERVING. Without an
address it probes 127.0.0.1 on the port of the role this container runs: the role is read from
PID 1's command line (`python -m services.planner` → planner) and its port from
`ATTEST_<ROLE>_PORT` or the default in `shared.config.DEFAULT_PORTS`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.config import DEFAULT_PORTS


def role_from_cmdline(argv: list[str]) -> str:
    """The role a `python -m <module>` command line runs; "gateway" when it is not recognisable."""
    if "-m" in argv and argv.index("-m") + 1 < len(argv):
        role = argv[argv.index("-m") + 1].rsplit(".", 1)[-1]
        if role in DEFAULT_PORTS:
            return role
    return "gateway"


def default_addr() -> str:
    try:
        argv = Path("/proc/1/cmdline").read_bytes().decode().split("\0")
    except OSError:
        argv = []
    role = role_from_cmdline(argv)
    port = os.environ.get(f"ATTEST_{role.upper()}_PORT") or str(DEFAULT_PORTS[role])
    return f"127.0.0.1:{port}"


def check(addr: str, timeout: float = 3.0) -> bool:
    """True when the server at `addr` reports SERVING within `timeout` seconds."""
    with grpc.insecure_channel(addr) as channel:
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
    addr = args[0] if args else default_addr()
    healthy = check(addr)
    print(f"{addr}: {'SERVING' if healthy else 'NOT SERVING'}")
    return 0 if healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
