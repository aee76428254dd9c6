"""Client side: one channel per downstream address, traced, with deadlines from the caller's.

STYLE: every client call has a deadline derived from the caller's remaining deadline;
`wait_for_ready`-style waiting is for start-up only.
"""

from __future__ import annotations

import math
import threading

import grpc
from opentelemetry.sdk.trace import TracerProvider

from shared.telemetry import traced_channel

DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
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
    ) -> None:
        self._tracer_provider = tracer_provider
        self._credentials = credentials
        self._options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ]
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._raw_channels: list[grpc.Channel] = []

    def get(self, addr: str) -> grpc.Channel:
        """The channel for `addr` (`host:port`), created on first use."""
        with self._lock:
            channel = self._channels.get(addr)
            if channel is None:
                raw = (grpc.secure_channel(addr, self._credentials, options=self._options)
                       if self._credentials is not None
                       else grpc.insecure_channel(addr, options=self._options))
                self._raw_channels.append(raw)
                channel = raw
                if self._tracer_provider is not None:
                    channel = traced_channel(raw, self._tracer_provider)
                self._channels[addr] = channel
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


def wait_until_ready(channel: grpc.Channel, timeout: float) -> None:
    """Block until `channel` is connected (start-up only); raise TimeoutError after `timeout`."""
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError as exc:
        raise TimeoutError(f"channel not ready after {timeout:.1f}s") from exc
