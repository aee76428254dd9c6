"""How each `attest` command reaches the gateway: a channel to its public port (TLS when given
credentials), the caller's bearer token, and the one error line a failed command prints."""

from __future__ import annotations

import os

import grpc
from rich.console import Console
from rich.markup import escape

from attest.gateway.v1 import gateway_pb2_grpc


def caller_token(token: str | None) -> str | None:
    """The bearer token given on the command line, else ATTEST_AUTH_TOKEN; None: no token."""
    return token if token is not None else os.environ.get("ATTEST_AUTH_TOKEN") or None


def bearer_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def gateway_stub(addr: str,
                 credentials: grpc.ChannelCredentials | None) -> tuple[grpc.Channel, gateway_pb2_grpc.GatewayServiceStub]:
    """A channel to the gateway's public port: TLS with `credentials`, else plaintext."""
    channel = grpc.secure_channel(addr, credentials) if credentials is not None else grpc.insecure_channel(addr)
    return channel, gateway_pb2_grpc.GatewayServiceStub(channel)


def fail(console: Console, message: str, code: int) -> int:
    console.print(f"[red]error:[/red] {escape(message)}", highlight=False)
    return code
