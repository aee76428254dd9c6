"""OpenTelemetry wiring: one TracerProvider and one MeterProvider per process, passed explicitly
to whatever needs them.

The providers are also installed as the global ones (so library code using `trace.get_tracer` or
`metrics.get_meter` joins the same pipeline), but every helper here takes them as arguments: tests
can run several "services" in one process, each with its own providers and `service.name`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry import metrics, trace
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.grpc import client_interceptor as _otel_client_interceptor
from opentelemetry.instrumentation.grpc import filters, grpcext
from opentelemetry.instrumentation.grpc import server_interceptor as _otel_server_interceptor
from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from sqlalchemy.engine import Engine

_log = logging.getLogger(__name__)

# Short enough that a test waiting on a receiver sees spans promptly, long enough to batch.
_SCHEDULE_DELAY_MILLIS = 200
# Metrics are cumulative, so a short interval costs one small export per second and lets a test
# (or a dashboard) see a diagnosis counted promptly.
_METRIC_EXPORT_INTERVAL_MILLIS = 1000
# Marks an engine that already carries span listeners, so instrument_engine is idempotent.
_INSTRUMENTED_FLAG = "_attest_otel_instrumented"


@dataclass(frozen=True)
class Telemetry:
    """The process's providers: spans and metrics under one resource (`service.name`)."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider


def init_telemetry(service_name: str, otlp_endpoint: str | None) -> Telemetry:
    """Create the process's providers; export both over OTLP/gRPC when an endpoint is given."""
    # service.instance.id tells replicas of one role apart in Jaeger (the pod's name in Kubernetes).
    resource = Resource.create({SERVICE_NAME: service_name,
                                SERVICE_INSTANCE_ID: f"{socket.gethostname()}-{os.getpid()}"})
    provider = TracerProvider(resource=resource)
    readers = []
    if otlp_endpoint:
        exporter = OTLPSpanExporter(endpoint=otlp_endpoint, insecure=True)
        provider.add_span_processor(
            BatchSpanProcessor(exporter, schedule_delay_millis=_SCHEDULE_DELAY_MILLIS)
        )
        readers.append(
            PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=otlp_endpoint, insecure=True),
                export_interval_millis=_METRIC_EXPORT_INTERVAL_MILLIS,
            )
        )
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    # The OTel API refuses to replace a real global provider; only install over the proxy.
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider=provider, meter_provider=meter_provider)


def _not_health_or_reflection() -> filters.Condition[Any]:
    # Health probes arrive every few seconds (Kubernetes, start-up waits); tracing them only
    # buries the diagnosis traces. Applied on both the client and the server side.
    return filters.negate(
        filters.any_of(
            filters.service_prefix("grpc.health.v1."),
            filters.service_prefix("grpc.reflection."),
        )
    )


def server_interceptor(tracer_provider: TracerProvider) -> grpc.ServerInterceptor:
    """A server span per incoming call, continuing the caller's trace from the metadata."""
    interceptor: grpc.ServerInterceptor = _otel_server_interceptor(
        tracer_provider=tracer_provider, filter_=_not_health_or_reflection()
    )
    return interceptor


def client_interceptor(
    tracer_provider: TracerProvider,
) -> grpcext.UnaryClientInterceptor | grpcext.StreamClientInterceptor:
    """A client span per outgoing call, propagating the trace context in the metadata.

    It implements OTel's own interceptor interface: apply it with `traced_channel`, not
    `grpc.intercept_channel` (which rejects it).
    """
    interceptor: grpcext.UnaryClientInterceptor | grpcext.StreamClientInterceptor = _otel_client_interceptor(
        tracer_provider=tracer_provider, filter_=_not_health_or_reflection()
    )
    return interceptor


def traced_channel(channel: grpc.Channel, tracer_provider: TracerProvider) -> grpc.Channel:
    """`channel` with a client span around every call made through it."""
    traced: grpc.Channel = grpcext.intercept_channel(channel, client_interceptor(tracer_provider))
    return traced


def instrument_engine(engine: Engine, tracer_provider: TracerProvider | None) -> None:
    """Emit a span per SQL statement on this engine; calling it twice for one engine is harmless.

    The statement listeners are attached to this engine only. SQLAlchemyInstrumentor.instrument()
    would also wrap `create_engine` and `Engine.connect` process-wide, adding a `connect` span to
    every pool checkout: a dozen spans per diagnosis that time nothing but the pool.
    """
    if getattr(engine, _INSTRUMENTED_FLAG, False):
        return
    tracer = trace.get_tracer("opentelemetry.instrumentation.sqlalchemy", tracer_provider=tracer_provider)
    # The instrumentation counts pool use by adding to a counter at every checkout and checkin
    # (four measurements per transaction, a third of a traced statement's cost); the same metric
    # is read from the pool when metrics are collected instead.
    engine_tracer = EngineTracer(tracer, engine, metrics.NoOpUpDownCounter("db.client.connections.usage"))
    _observe_pool(engine, dict(getattr(engine_tracer, "_engine_attrs", {})))
    setattr(engine, _INSTRUMENTED_FLAG, True)


# Instrumented engines and their attributes (`pool.name`), for `db.client.connections.usage`.
_POOLS: weakref.WeakKeyDictionary[Engine, dict[str, Any]] = weakref.WeakKeyDictionary()
_POOL_USAGE_LOCK = threading.Lock()
_pool_usage_observed = False


def _observe_pool(engine: Engine, attributes: dict[str, Any]) -> None:
    global _pool_usage_observed
    with _POOL_USAGE_LOCK:
        _POOLS[engine] = attributes
        if not _pool_usage_observed:
            metrics.get_meter("opentelemetry.instrumentation.sqlalchemy").create_observable_up_down_counter(
                name="db.client.connections.usage", callbacks=[_pool_usage], unit="connections")
            _pool_usage_observed = True


def _pool_usage(_options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
    """Connections in use and idle in each instrumented engine's pool (a pool that does not
    count them, SQLite's in-memory StaticPool, reports nothing)."""
    for engine, attributes in list(_POOLS.items()):
        pool = engine.pool
        for state, count in (("used", getattr(pool, "checkedout", None)), ("idle", getattr(pool, "checkedin", None))):
            if callable(count):
                yield metrics.Observation(int(count()), {**attributes, "state": state})


def shutdown_telemetry(telemetry: Telemetry | None, timeout_millis: int = 5000) -> None:
    """Flush pending spans and metric points, then stop the exporters (call once, at exit)."""
    if telemetry is None:
        return
    if not telemetry.tracer_provider.force_flush(timeout_millis=timeout_millis):
        _log.warning("spans not flushed within %d ms", timeout_millis)
    telemetry.tracer_provider.shutdown()
    # MeterProvider.shutdown collects and exports one last time, so final counts are not lost.
    telemetry.meter_provider.shutdown(timeout_millis=timeout_millis)
