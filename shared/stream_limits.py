"""Bounded streams on the services every peer may call (health `Watch`, server reflection).

A sync gRPC server holds one thread-pool worker per call in flight, streams included, and the
health and reflection services answer any peer: on the gateway's public port without a token, on
a role's port with any certificate the CA signed. Left alone, a few idle streams take every worker
and Diagnose waits behind them. So their streaming calls:

- run on a pool of their own (`experimental_thread_pool`, which grpcio honours per method), sized
  for the total limit plus a little headroom to refuse the excess; the server's own workers serve
  the application's calls only;
- are counted per peer (the peer's address without its port, and the Attest identity of its
  certificate when it has one) and in total; beyond either limit a call ends at once with
  RESOURCE_EXHAUSTED;
- are cancelled when no message went either way for the idle timeout (a cancel from another
  thread is what wakes a worker blocked on the next request or on a health status change).

Their unary methods (health `Check`) and the request of `Watch` are read on that pool too: a sync
server reads a unary request on a worker before any handler runs, so a caller that sends headers
and never a body would otherwise hold one of the application's workers. A request normally comes
with its headers, so a call waiting for one is never refused (a burst of probes from one node is
no attack); the watchdog cancels those still waiting after AWAIT_GRACE_SECONDS beyond the limits
(per peer and in total, counted apart from open streams, newest first), and every one still
waiting after FIRST_REQUEST_SECONDS.

The interceptor must be the outermost one: the handler it returns is the one whose behaviour
carries the pool.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import grpc

from shared.peer_identity import OPEN_SERVICES, peer_identities

_log = logging.getLogger(__name__)

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
# Workers beyond the total limit, so that calls over it are refused rather than queued.
REFUSAL_HEADROOM = 2
# A peer's refusals are logged once per this many seconds: a flood of streams is no flood of logs.
REFUSAL_LOG_INTERVAL = 10.0
# A client sends a unary request with its headers; one that has not arrived by then never will.
FIRST_REQUEST_SECONDS = 10.0
# Calls still waiting for their request after this long count against the limits.
AWAIT_GRACE_SECONDS = 1.0
# What a call counts as: an open stream, or a call whose request has not arrived yet.
STREAM, AWAITING_REQUEST = "stream", "awaiting request"


@dataclass(frozen=True)
class StreamLimitSettings:
    """How many open streams one peer and all peers together may hold, and how long a stream
    may stay silent before it is closed."""

    per_peer: int
    total: int
    idle_timeout_seconds: float


@dataclass(eq=False)
class _Stream:
    peer: str
    method: str
    context: grpc.ServicerContext
    kind: str = STREAM
    last_activity: float = field(default_factory=time.monotonic)
    closing: bool = False

    def touch(self) -> None:
        self.last_activity = time.monotonic()


def peer_key(context: grpc.ServicerContext) -> str:
    """Whom a stream counts against: the peer's host (every connection from one address is one
    peer) and, over mutual TLS, the identity its certificate names."""
    address = context.peer() or "unknown"
    host = address.rsplit(":", 1)[0] if address.startswith(("ipv4:", "ipv6:")) else address
    identities = peer_identities(context)
    return f"{host} ({', '.join(identities)})" if identities else host


def _service_of(method: str) -> str:
    return method.lstrip("/").split("/", 1)[0]


class StreamLimitInterceptor(grpc.ServerInterceptor):
    """Streams of `limited_services` on their own bounded pool, limited per peer and in total,
    closed when idle (see the module docstring)."""

    def __init__(self, limits: StreamLimitSettings, *, name: str = "server",
                 limited_services: Collection[str] = OPEN_SERVICES) -> None:
        self._limits = limits
        self._services = frozenset(limited_services)
        self._pool = futures.ThreadPoolExecutor(max_workers=limits.total + REFUSAL_HEADROOM,
                                                thread_name_prefix=f"{name}-stream")
        self._lock = threading.Lock()
        self._open: set[_Stream] = set()
        self._per_peer: Counter[str] = Counter()  # open streams
        self._per_kind: Counter[str] = Counter()
        self._watchdog: threading.Thread | None = None
        self._refusals_logged: dict[str, float] = {}

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Handler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = continuation(handler_call_details)
        if handler is None or _service_of(handler_call_details.method) not in self._services:
            return handler
        method = handler_call_details.method
        # Unary requests are read by the behaviour (declared request-streaming), after admission.
        if handler.unary_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._on_pool(self._unary_unary(handler.unary_unary, method)),
                handler.request_deserializer, handler.response_serializer)
        if handler.unary_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._on_pool(self._unary_stream(handler.unary_stream, method)),
                handler.request_deserializer, handler.response_serializer)
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._on_pool(self._stream_stream(handler.stream_stream, method)),
                handler.request_deserializer, handler.response_serializer)
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._on_pool(self._stream_unary(handler.stream_unary, method)),
                handler.request_deserializer, handler.response_serializer)
        return handler

    def _on_pool(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        # grpcio runs a behaviour carrying this attribute on that pool instead of the server's.
        setattr(behaviour, "experimental_thread_pool", self._pool)  # noqa: B010 - a function attribute
        return behaviour

    def _unary_unary(self, inner: Callable[..., Any], method: str) -> Callable[..., Any]:
        def behaviour(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
            request = self._request(requests, context, method)
            return inner(request, context)

        return behaviour

    def _unary_stream(self, inner: Callable[..., Iterator[Any]], method: str) -> Callable[..., Iterator[Any]]:
        def behaviour(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            request = self._request(requests, context, method)
            stream = self._admit(context, method)
            try:
                for response in inner(request, context):
                    stream.touch()
                    yield response
            finally:
                self._release(stream)

        return behaviour

    def _request(self, requests: Iterator[Any], context: grpc.ServicerContext, method: str) -> Any:
        """The one request of a unary-request method, waited for as a counted call that is
        cancelled after FIRST_REQUEST_SECONDS."""
        waiting = _Stream(peer=peer_key(context), method=method, context=context, kind=AWAITING_REQUEST)
        with self._lock:
            self._open.add(waiting)
            self._per_kind[AWAITING_REQUEST] += 1
            self._start_watchdog()
        try:
            for request in _touching(requests, waiting):
                return request
        finally:
            self._release(waiting)
        # Cancelled by the watchdog (the caller sees CANCELLED), or half-closed with no message.
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call ended without a request message")
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    def _first_request_seconds(self) -> float:
        return min(FIRST_REQUEST_SECONDS, self._limits.idle_timeout_seconds)

    def _stream_stream(self, inner: Callable[..., Iterator[Any]], method: str) -> Callable[..., Iterator[Any]]:
        def behaviour(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            stream = self._admit(context, method)
            try:
                for response in inner(_touching(requests, stream), context):
                    stream.touch()
                    yield response
            finally:
                self._release(stream)

        return behaviour

    def _stream_unary(self, inner: Callable[..., Any], method: str) -> Callable[..., Any]:
        def behaviour(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
            stream = self._admit(context, method)
            try:
                return inner(_touching(requests, stream), context)
            finally:
                self._release(stream)

        return behaviour

    def _admit(self, context: grpc.ServicerContext, method: str) -> _Stream:
        peer = peer_key(context)
        with self._lock:
            if self._per_kind[STREAM] >= self._limits.total:
                refusal = f"too many open streams on this server ({self._limits.total}); retry later"
            elif self._per_peer[peer] >= self._limits.per_peer:
                refusal = (f"too many open streams from this peer ({self._limits.per_peer}); "
                           "close one or retry later")
            else:
                stream = _Stream(peer=peer, method=method, context=context)
                self._open.add(stream)
                self._per_peer[peer] += 1
                self._per_kind[STREAM] += 1
                self._start_watchdog()
                return stream
            log_it = self._refusal_to_log(peer)
        if log_it:
            _log.warning("refused %s from %s: %s (further refusals of this peer unlogged for %.0f s)",
                         method, peer, refusal, REFUSAL_LOG_INTERVAL)
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    def _refusal_to_log(self, peer: str) -> bool:
        """Whether to log a refusal of `peer` now (called with the lock held)."""
        now = time.monotonic()
        if len(self._refusals_logged) > 1000:
            self._refusals_logged = {key: at for key, at in self._refusals_logged.items()
                                     if now - at < REFUSAL_LOG_INTERVAL}
        if now - self._refusals_logged.get(peer, -REFUSAL_LOG_INTERVAL) < REFUSAL_LOG_INTERVAL:
            return False
        self._refusals_logged[peer] = now
        return True

    def _release(self, stream: _Stream) -> None:
        with self._lock:
            if stream in self._open:
                self._open.discard(stream)
                self._per_kind[stream.kind] -= 1
                if stream.kind == STREAM:
                    self._per_peer[stream.peer] -= 1
                    if self._per_peer[stream.peer] <= 0:
                        del self._per_peer[stream.peer]

    def _start_watchdog(self) -> None:
        """Start the idle-stream check unless it runs (called with the lock held)."""
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._close_idle_streams, daemon=True,
                                              name="stream-idle-watchdog")
            self._watchdog.start()

    def _close_idle_streams(self) -> None:
        timeouts = {STREAM: self._limits.idle_timeout_seconds, AWAITING_REQUEST: self._first_request_seconds()}
        interval = min(AWAIT_GRACE_SECONDS / 2, min(timeouts.values()) / 4)
        while True:
            time.sleep(interval)
            now = time.monotonic()
            with self._lock:
                if not self._open:  # no stream left to watch: the next one starts a new check
                    self._watchdog = None
                    return
                idle = [stream for stream in self._open
                        if not stream.closing and now - stream.last_activity >= timeouts[stream.kind]]
                excess = self._awaiting_past_limits(now)
                for stream in (*idle, *excess):
                    # Still counted until its worker is back (the behaviour's finally releases it).
                    stream.closing = True
            for stream in idle:
                _log.info("closing %s from %s: idle for %.0f s", stream.method, stream.peer, timeouts[stream.kind])
                stream.context.cancel()
            for stream in excess:
                stream.context.cancel()
            if excess:
                _log.warning("cancelled %d calls that sent no request beyond the limits", len(excess))

    def _awaiting_past_limits(self, now: float) -> list[_Stream]:
        """Calls waiting for their request longer than AWAIT_GRACE_SECONDS beyond the per-peer and
        total limits, newest first (called with the lock held)."""
        settled = sorted((stream for stream in self._open
                          if stream.kind == AWAITING_REQUEST and not stream.closing
                          and now - stream.last_activity >= AWAIT_GRACE_SECONDS),
                         key=lambda stream: stream.last_activity)
        kept: Counter[str] = Counter()
        excess = []
        for stream in settled:
            if kept[stream.peer] >= self._limits.per_peer or kept.total() >= self._limits.total:
                excess.append(stream)
            else:
                kept[stream.peer] += 1
        return excess


def _touching(requests: Iterator[Any], stream: _Stream) -> Iterator[Any]:
    """The requests, each marking the stream active; they just end once it was closed as idle
    (reading a cancelled call raises, which is no error of the handler's)."""
    try:
        for request in requests:
            stream.touch()
            yield request
    except grpc.RpcError:
        if not stream.closing:
            raise
