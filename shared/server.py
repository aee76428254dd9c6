"""Building and running a service's gRPC server the same way in all six processes.

Every server gets: a thread pool, bounded message sizes, OTel server spans (when a provider is
given), error → status mapping, the library HealthServicer, reflection (v1 and v1alpha), and a
shutdown that reports NOT_SERVING before it stops accepting calls (STYLE: Services). Streams of
health and reflection, which any peer may open, run on a bounded pool of their own
(shared/stream_limits.py), so the workers stay for the application's calls. A port is never
shared with another process (no SO_REUSEPORT): one already in use ends the process with one line
naming the port and the role. Its port is secured as its `ServerTransport` says (mutual TLS with a caller check for roles, see
shared/transport_security.py); `settings.health_port` adds a plaintext port serving only health.
Readiness (databases, downstream roles) is re-checked while serving (shared/readiness.py).
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from shared.config import MIN_KEEPALIVE_SECONDS, CommonSettings, ServiceSettings, service_addr
from shared.db.connectivity import DatabaseUnavailable, check_database, display_url
from shared.interceptors import ErrorMappingInterceptor
from shared.logging_setup import configure_logging
from shared.peer_identity import CallerIdentityInterceptor
from shared.readiness import Check, ReadinessMonitor, database_check
from shared.reflection_v1 import enable_reflection
from shared.stream_limits import StreamLimitInterceptor, StreamLimitSettings
from shared.telemetry import Telemetry, init_telemetry, server_interceptor, shutdown_telemetry
from shared.tls import TlsConfigError
from shared.transport_security import PLAINTEXT, ServerTransport, role_transport

_log = logging.getLogger(__name__)

# The health service's own name, reported together with the application's services.
HEALTH_SERVICE_NAME: str = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
# Liveness: SERVING while the process serves at all, whatever its dependencies (readiness is ""
# and the service names). Kubernetes' livenessProbe asks for this name, so an unreachable
# database makes a pod unready, never restarted in a loop.
LIVENESS_SERVICE_NAME = "liveness"


@dataclass
class RunningServer:
    """A started server, the port it actually bound and its health servicer; the plaintext
    health-only server and its port when one was asked for."""

    server: grpc.Server
    port: int
    health: health.HealthServicer
    health_server: grpc.Server | None = None
    health_port: int = 0
    readiness: ReadinessMonitor | None = None
    # Runs once NOT_SERVING is reported, before the server stops, with the grace period: the
    # service's own drain (the gateway finishes or ends its runs in flight).
    on_stop: Callable[[float], None] | None = None

    def stop(self, grace: float | None) -> None:
        """Report NOT_SERVING (so load balancers drain us), drain (`on_stop`), then stop within
        `grace` seconds."""
        if self.readiness is not None:
            self.readiness.stop()
        self.health.enter_graceful_shutdown()
        if self.on_stop is not None:
            try:
                self.on_stop(grace or 0.0)
            except Exception:
                _log.exception("draining before the stop failed")
        self.server.stop(grace).wait()
        if self.health_server is not None:
            self.health_server.stop(None).wait()


class PortUnavailable(RuntimeError):
    """The server could not listen on its address; the message names the port and the role."""


def _bind(server: grpc.Server, address: str, credentials: grpc.ServerCredentials | None, what: str) -> int:
    host, _, number = address.rpartition(":")
    # Asked first so that the error says why (grpcio only reports that it failed).
    reason = bind_failure(host, number) if number != "0" else None
    if reason is None:
        try:
            port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
        except RuntimeError:
            port = 0
        if port:
            return port
        reason = bind_failure(host, number) or "gRPC could not bind it"
    raise PortUnavailable(f"{what} cannot listen on port {number} ({address}): {reason}")


def bind_failure(host: str, port: str) -> str | None:
    """Why `host:port` cannot be bound, as the kernel says it; None if it can."""
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, int(port)))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return "the port is already in use by another process"
        return exc.strerror or str(exc)
    except ValueError:  # not a numeric address (a host name): grpc resolves it, the probe cannot
        return None
    return None


def stream_limits(settings: CommonSettings) -> StreamLimitSettings:
    return StreamLimitSettings(per_peer=settings.stream_max_per_peer, total=settings.stream_max_total,
                               idle_timeout_seconds=settings.stream_idle_timeout_seconds)


def _start_health_server(settings: ServiceSettings, servicer: health.HealthServicer, service_name: str) -> tuple[grpc.Server, int]:
    """A plaintext server on `settings.health_port` with the health service only, for probes
    that cannot present a client certificate (Kubernetes' gRPC probes)."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"{service_name}-health"),
        interceptors=[StreamLimitInterceptor(stream_limits(settings), name=f"{service_name}-health")],
        options=server_options(settings),
    )
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    host = service_addr(settings).rsplit(":", 1)[0]
    port = _bind(server, f"{host}:{settings.health_port}", None, f"{service_name} health port")
    server.start()
    return server, port


def server_options(settings: CommonSettings) -> list[tuple[str, int]]:
    """Message limits; connections closed after a maximum age (with a grace for the calls in
    flight) so that clients re-resolve and spread over replicas that appeared since;
    keepalive pings accepted as often as clients may send them (MIN_KEEPALIVE_SECONDS) rather
    than answered with GOAWAY too_many_pings. No SO_REUSEPORT (grpcio sets it by default on
    Linux): a second process on the same port must fail, not silently take half the connections."""
    return [
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.max_connection_age_ms", int(settings.grpc_max_connection_age_seconds * 1000)),
        ("grpc.max_connection_age_grace_ms", int(settings.grpc_max_connection_age_grace_seconds * 1000)),
        ("grpc.http2.min_ping_interval_without_data_ms", int(MIN_KEEPALIVE_SECONDS * 1000)),
    ]


def build_server(
    *,
    service_name: str,
    settings: ServiceSettings,
    register: Callable[[grpc.Server], None],
    service_names: Sequence[str],
    tracer_provider: TracerProvider | None = None,
    extra_interceptors: Sequence[grpc.ServerInterceptor] = (),
    transport: ServerTransport = PLAINTEXT,
) -> RunningServer:
    """Create, register and start a server on `settings.bind_host:settings.port` (0 = ephemeral).

    `register` adds the application servicers; `service_names` are their full proto names, which
    are reported SERVING by the health service and listed by reflection. `transport` secures the
    port (processes get theirs from `run_service`; in-process test servers default to plaintext).
    """
    # Outermost of all: the handler it returns carries the streams' own pool (see its module).
    interceptors: list[grpc.ServerInterceptor] = [StreamLimitInterceptor(stream_limits(settings), name=service_name)]
    if tracer_provider is not None:
        # Outside the rest, so the span covers everything, including the status chosen below.
        interceptors.append(server_interceptor(tracer_provider))
    interceptors.append(ErrorMappingInterceptor())
    if transport.allowed_callers is not None:
        # Inside the error mapping, which turns its refusal into PERMISSION_DENIED.
        interceptors.append(CallerIdentityInterceptor(service_name, transport.allowed_callers))
    interceptors.extend(extra_interceptors)

    server = grpc.server(
        futures.ThreadPoolExecutor(
            max_workers=settings.max_workers, thread_name_prefix=f"{service_name}-rpc"
        ),
        interceptors=interceptors,
        options=server_options(settings),
    )
    register(server)

    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", LIVENESS_SERVICE_NAME, *service_names):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    enable_reflection((*service_names, HEALTH_SERVICE_NAME), server)

    port = _bind(server, service_addr(settings), transport.credentials, service_name)
    server.start()
    running = RunningServer(server=server, port=port, health=health_servicer)
    if settings.health_port:
        try:
            running.health_server, running.health_port = _start_health_server(settings, health_servicer, service_name)
        except BaseException:
            server.stop(None)
            raise
    return running


def serve(
    *,
    service_name: str,
    settings: ServiceSettings,
    register: Callable[[grpc.Server], None],
    service_names: Sequence[str],
    tracer_provider: TracerProvider | None = None,
    extra_interceptors: Sequence[grpc.ServerInterceptor] = (),
    telemetry: Telemetry | None = None,
    on_serving: Callable[[RunningServer], None] | None = None,
    transport: ServerTransport = PLAINTEXT,
    readiness_checks: Mapping[str, Check] | None = None,
) -> None:
    """Run a server until SIGTERM/SIGINT, then drain it and flush telemetry.

    Prints `READY <service_name> <port>` on stdout once listening: the launcher and the
    integration tests wait for that line (and learn the ephemeral port from it). `on_serving`
    runs just before, e.g. to report the health of a dependency under its own service name.
    `readiness_checks` are re-checked every `settings.readiness_interval_seconds`; the health of
    "" and of `service_names` is SERVING only while all of them pass.
    """
    try:
        running = build_server(
            service_name=service_name,
            settings=settings,
            register=register,
            service_names=service_names,
            tracer_provider=tracer_provider,
            extra_interceptors=extra_interceptors,
            transport=transport,
        )
    except PortUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        shutdown_telemetry(telemetry)
        raise SystemExit(1) from None
    if readiness_checks:
        running.readiness = ReadinessMonitor(
            readiness_checks, running.health, service_names, settings.readiness_interval_seconds
        )
        running.readiness.start()
    if on_serving is not None:
        on_serving(running)
    stopping = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        if stopping.is_set():
            return
        stopping.set()
        _log.info("%s received signal %d, stopping", service_name, signum)
        # Stop off the signal handler: it waits up to the grace period for in-flight calls.
        threading.Thread(
            target=running.stop, args=(settings.shutdown_grace_seconds,), daemon=True
        ).start()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)

    _log.info("serving %s on %s:%d", service_name, settings.bind_host, running.port)
    _log.info("transport: %s", transport.description)
    if running.health_server is not None:
        _log.info("plaintext health-only port %d", running.health_port)
    print(f"READY {service_name} {running.port}", flush=True)
    try:
        running.server.wait_for_termination()
    finally:
        shutdown_telemetry(telemetry)
        _log.info("%s stopped", service_name)


def run_service(
    *,
    service_name: str,
    settings: ServiceSettings,
    service: ServiceDescriptor,
    add_servicer: Callable[[Any, grpc.Server], None],
    build_servicer: Callable[[TracerProvider, MeterProvider], Any],
    extra_interceptors: Sequence[grpc.ServerInterceptor] = (),
    databases: Sequence[str] = (),
    on_serving: Callable[[RunningServer], None] | None = None,
    transport: Callable[[], ServerTransport] | None = None,
    readiness_checks: Callable[[], Mapping[str, Check]] | None = None,
) -> None:
    """Everything a role's `__main__` does: logging, telemetry, its servicer, then `serve()`.

    `transport` decides how the port is secured (default: a role's mutual TLS from settings,
    `role_transport`); missing or unusable certificates without ATTEST_INSECURE=1 end the process
    with exit code 1 and one line on stderr, as does an unusable database: `databases` are the
    URLs the role cannot work without, each gets a `SELECT 1` first (no traceback, no server
    that would fail every call). While serving, the databases and `readiness_checks` (built once
    the transport is known to be usable) decide readiness.

    `build_servicer` receives the tracer and meter providers so that dependencies needing them (a
    traced database engine, traced channels, metric instruments) are built with them, never from a
    module global.
    """
    configure_logging(service_name, settings.log_level)
    try:
        chosen = transport() if transport is not None else role_transport(settings)
    except TlsConfigError as exc:
        print(f"error: {service_name}: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    for url in databases:
        try:
            check_database(url)
        except DatabaseUnavailable as exc:
            print(f"error: {service_name}: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(1) from None
    telemetry = init_telemetry(service_name, settings.otlp_endpoint)
    tracer_provider = telemetry.tracer_provider
    servicer = build_servicer(tracer_provider, telemetry.meter_provider)
    timeout = settings.readiness_timeout_seconds
    checks = {f"database {display_url(url)}": database_check(url, timeout) for url in databases}
    checks |= readiness_checks() if readiness_checks is not None else {}
    serve(
        service_name=service_name,
        settings=settings,
        register=lambda server: add_servicer(servicer, server),
        service_names=[service.full_name],
        tracer_provider=tracer_provider,
        extra_interceptors=extra_interceptors,
        telemetry=telemetry,
        on_serving=on_serving,
        transport=chosen,
        readiness_checks=checks,
    )
