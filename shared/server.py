"""Building and running a service's gRPC server the same way in all six processes.

Every server gets: a thread pool, bounded message sizes, OTel server spans (when a provider is
given), error → status mapping, the library HealthServicer, reflection, and a shutdown that
reports NOT_SERVING before it stops accepting calls (STYLE: Services).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from shared.config import ServiceSettings, service_addr
from shared.db.connectivity import DatabaseUnavailable, check_database
from shared.interceptors import ErrorMappingInterceptor
from shared.logging_setup import configure_logging
from shared.telemetry import Telemetry, init_telemetry, server_interceptor, shutdown_telemetry

_log = logging.getLogger(__name__)

# The health service's own name, reported together with the application's services.
HEALTH_SERVICE_NAME: str = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


@dataclass
class RunningServer:
    """A started server, the port it actually bound and its health servicer."""

    server: grpc.Server
    port: int
    health: health.HealthServicer

    def stop(self, grace: float | None) -> None:
        """Report NOT_SERVING (so load balancers drain us), then stop within `grace` seconds."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()


def build_server(
    *,
    service_name: str,
    settings: ServiceSettings,
    register: Callable[[grpc.Server], None],
    service_names: Sequence[str],
    tracer_provider: TracerProvider | None = None,
    extra_interceptors: Sequence[grpc.ServerInterceptor] = (),
) -> RunningServer:
    """Create, register and start a server on `settings.bind_host:settings.port` (0 = ephemeral).

    `register` adds the application servicers; `service_names` are their full proto names, which
    are reported SERVING by the health service and listed by reflection.
    """
    interceptors: list[grpc.ServerInterceptor] = []
    if tracer_provider is not None:
        # Outermost, so the span covers everything, including the status chosen below.
        interceptors.append(server_interceptor(tracer_provider))
    interceptors.append(ErrorMappingInterceptor())
    interceptors.extend(extra_interceptors)

    server = grpc.server(
        futures.ThreadPoolExecutor(
            max_workers=settings.max_workers, thread_name_prefix=f"{service_name}-rpc"
        ),
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", settings.max_message_bytes),
            ("grpc.max_send_message_length", settings.max_message_bytes),
        ],
    )
    register(server)

    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", *service_names):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        (*service_names, HEALTH_SERVICE_NAME, reflection.SERVICE_NAME), server
    )

    address = service_addr(settings)
    port = server.add_insecure_port(address)
    if port == 0:  # older grpcio reports a failed bind this way instead of raising
        raise RuntimeError(f"{service_name}: could not bind {address}")
    server.start()
    return RunningServer(server=server, port=port, health=health_servicer)


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
) -> None:
    """Run a server until SIGTERM/SIGINT, then drain it and flush telemetry.

    Prints `READY <service_name> <port>` on stdout once listening: the launcher and the
    integration tests wait for that line (and learn the ephemeral port from it). `on_serving`
    runs just before, e.g. to report the health of a dependency under its own service name.
    """
    running = build_server(
        service_name=service_name,
        settings=settings,
        register=register,
        service_names=service_names,
        tracer_provider=tracer_provider,
        extra_interceptors=extra_interceptors,
    )
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
) -> None:
    """Everything a role's `__main__` does: logging, telemetry, its servicer, then `serve()`.

    `databases` are the URLs the role cannot work without: each gets a `SELECT 1` first, and an
    unusable one ends the process with exit code 1 and a single line on stderr (no traceback,
    no server that would fail every call).

    `build_servicer` receives the tracer and meter providers so that dependencies needing them (a
    traced database engine, traced channels, metric instruments) are built with them, never from a
    module global.
    """
    configure_logging(service_name, settings.log_level)
    for url in databases:
        try:
            check_database(url)
        except DatabaseUnavailable as exc:
            print(f"error: {service_name}: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(1) from None
    telemetry = init_telemetry(service_name, settings.otlp_endpoint)
    tracer_provider = telemetry.tracer_provider
    servicer = build_servicer(tracer_provider, telemetry.meter_provider)
    serve(
        service_name=service_name,
        settings=settings,
        register=lambda server: add_servicer(servicer, server),
        service_names=[service.full_name],
        tracer_provider=tracer_provider,
        extra_interceptors=extra_interceptors,
        telemetry=telemetry,
        on_serving=on_serving,
    )
