"""Client side: one channel per downstream target, traced, with deadlines from the caller's.

A target is anything gRPC resolves: `host:port`, `dns:///host:port` (every address DNS returns:
a Kubernetes headless Service's pods, compose's replicas) or `ipv4:127.0.0.1:p1,127.0.0.1:p2`
(the launcher's local replicas). Every channel spreads its calls over all the target's
addresses (`round_robin`: a call, not a connection, is the unit of balancing), skipping an
address that does not connect, and pings its connections while calls are in flight so that a
replica that vanished is noticed. Servers close connections after a maximum age
(shared/server.py), which makes the channel resolve its target again.

STYLE: every client call has a deadline derived from the caller's remaining deadline;
`wait_for_ready`-style waiting is for start-up only.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry.sdk.trace import TracerProvider

from shared.config import CommonSettings
from shared.telemetry import traced_channel
from shared.transport_security import role_tls_name

DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
# A replica restarting, or one gone that the channel has not noticed yet: a call that finds no
# connection, or loses its replica, is made again (idempotent methods only) after a short backoff,
# within its deadline. Reconnecting is retried at least once a second (gRPC's default backs off
# up to two minutes), so a replica that comes back takes calls again within about a second.
RETRY_MAX_ATTEMPTS = 5
_RETRY_POLICY = {"maxAttempts": RETRY_MAX_ATTEMPTS, "initialBackoff": "0.2s", "maxBackoff": "1s",
                 "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
_RECONNECT_BACKOFF_MS = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                         ("grpc.max_reconnect_backoff_ms", 1000))
# Address-list schemes: the target names its addresses itself, and has no host to check a
# certificate against, so a TLS channel checks the first address (every replica of a role holds
# the same certificate).
_ADDRESS_LIST_SCHEMES = ("ipv4:", "ipv6:")


@dataclass(frozen=True)
class IdempotentMethod:
    """A method (or every method of a service, `method=""`) that may be made again when its call
    found no replica or lost it: it changes nothing a second call could duplicate."""

    service: str
    method: str = ""

    def config_name(self) -> dict[str, str]:
        return {"service": self.service, **({"method": self.method} if self.method else {})}


def service_config(idempotent: tuple[IdempotentMethod, ...] = ()) -> str:
    """Round robin over the target's addresses; the retry policy for `idempotent` methods."""
    config: dict[str, Any] = {"loadBalancingConfig": [{"round_robin": {}}]}
    if idempotent:
        config["methodConfig"] = [{"name": [m.config_name() for m in idempotent], "retryPolicy": _RETRY_POLICY}]
    return json.dumps(config)


@dataclass(frozen=True)
class Keepalive:
    """Client keepalive: a ping every `interval_seconds` while calls are in flight, and the
    connection dropped when one is not answered within `timeout_seconds`."""

    interval_seconds: float = 20.0
    timeout_seconds: float = 10.0

    @classmethod
    def from_settings(cls, settings: CommonSettings) -> Keepalive:
        return cls(settings.grpc_keepalive_seconds, settings.grpc_keepalive_timeout_seconds)


def channel_options(target: str, max_message_bytes: int, keepalive: Keepalive, secure: bool,
                    idempotent: tuple[IdempotentMethod, ...] = (),
                    peer_name: str | None = None) -> list[tuple[str, Any]]:
    """The options of every channel to a role: round robin over the target's addresses, retries
    of `idempotent` methods, keepalive, quick reconnects, message limits, and for a TLS address
    list the authority its certificate names. With `peer_name`, a TLS channel accepts only a
    server whose certificate carries that DNS name, whatever address it dials."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.service_config", service_config(idempotent)),
        ("grpc.keepalive_time_ms", int(keepalive.interval_seconds * 1000)),
        ("grpc.keepalive_timeout_ms", int(keepalive.timeout_seconds * 1000)),
        *_RECONNECT_BACKOFF_MS,
    ]
    if secure and target.startswith(_ADDRESS_LIST_SCHEMES):
        first = target.split(":", 1)[1].split(",", 1)[0]
        options.append(("grpc.default_authority", first))
    if secure and peer_name:
        # gRPC checks the server's certificate against this name instead of the dialled host:
        # every certificate of the CA also names localhost and 127.0.0.1, so the host alone
        # would admit any role (or any other identity the CA signed) on a role's address.
        options.append(("grpc.ssl_target_name_override", peer_name))
    return options
# A remaining time beyond this means the incoming call had no deadline at all.
_NO_DEADLINE_SECONDS = 365 * 24 * 3600.0


class ChannelPool:
    """Caches one channel per address; channels are thread-safe and meant to be shared.

    With `credentials` every channel is TLS (the process's certificate for mutual TLS, see
    shared/transport_security.py `client_credentials`); None is plaintext (ATTEST_INSECURE=1).
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        credentials: grpc.ChannelCredentials | None = None,
        keepalive: Keepalive | None = None,
        idempotent: tuple[IdempotentMethod, ...] = (),
    ) -> None:
        self._tracer_provider = tracer_provider
        self._credentials = credentials
        self._max_message_bytes = max_message_bytes
        self._keepalive = keepalive or Keepalive()
        self._idempotent = idempotent
        self._lock = threading.Lock()
        self._channels: dict[tuple[str, str | None], grpc.Channel] = {}
        self._raw_channels: list[grpc.Channel] = []

    def get(self, addr: str, role: str | None = None) -> grpc.Channel:
        """The channel for the target `addr` (see the module's docstring), created on first use.
        With `role`, a TLS channel admits only a server holding that role's certificate
        (`role_tls_name`); without, any server the CA signed."""
        with self._lock:
            channel = self._channels.get((addr, role))
            if channel is None:
                options = channel_options(addr, self._max_message_bytes, self._keepalive,
                                          secure=self._credentials is not None, idempotent=self._idempotent,
                                          peer_name=role_tls_name(role) if role else None)
                raw = (grpc.secure_channel(addr, self._credentials, options=options)
                       if self._credentials is not None
                       else grpc.insecure_channel(addr, options=options))
                self._raw_channels.append(raw)
                channel = raw
                if self._tracer_provider is not None:
                    channel = traced_channel(raw, self._tracer_provider)
                self._channels[(addr, role)] = channel
            return channel

    def close(self) -> None:
        """Close every channel; in-flight calls on them are cancelled."""
        with self._lock:
            raw, self._raw_channels = self._raw_channels, []
            self._channels.clear()
        for channel in raw:
            channel.close()


def child_timeout(
    context: grpc.ServicerContext | None, default: float, floor: float = 0.05
) -> float:
    """Timeout for a downstream call made while serving `context`.

    The remaining deadline of the incoming call when it has one, else `default`; never below
    `floor`, so that an almost-expired call still fails as DEADLINE_EXCEEDED downstream rather
    than with an invalid timeout.
    """
    remaining = context.time_remaining() if context is not None else None
    if remaining is None or math.isinf(remaining) or remaining > _NO_DEADLINE_SECONDS:
        remaining = default
    return max(remaining, floor)


def wait_connected(channel: grpc.Channel, timeout: float) -> bool:
    """Wait up to `timeout` seconds for `channel` to have a connected replica; whether it has."""
    future = grpc.channel_ready_future(channel)
    try:
        future.result(timeout=timeout)
    except grpc.FutureTimeoutError:
        future.cancel()
        return False
    return True


def wait_until_ready(channel: grpc.Channel, timeout: float) -> None:
    """Block until `channel` is connected (start-up only); raise TimeoutError after `timeout`."""
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError as exc:
        raise TimeoutError(f"channel not ready after {timeout:.1f}s") from exc
