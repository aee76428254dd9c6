"""A real OTLP/gRPC trace and metrics receiver for tests: the protocol Jaeger and the OTel
Collector accept.

Spans arrive through `TraceService/Export` and metric points through `MetricsService/Export`
exactly as a collector would receive them, so a test that finds them here has proven the
exporters, the batching and the propagation end to end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

SpanDict = dict[str, Any]
PointDict = dict[str, Any]


def _any_value(value: common_pb2.AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in pairs}


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: Callable[[list[SpanDict]], None]) -> None:
        self._sink = sink

    def Export(self, request, context):  # noqa: N802 - gRPC method name
        spans: list[SpanDict] = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        {
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(),
                            "name": span.name,
                            "kind": trace_pb2.Span.SpanKind.Name(span.kind),
                            "service_name": resource.get("service.name", ""),
                            "service_instance": resource.get("service.instance.id", ""),
                            "scope": scope_spans.scope.name,
                            "attributes": _attributes(span.attributes),
                            "status_code": trace_pb2.Status.StatusCode.Name(span.status.code),
                            "start_time_unix_nano": span.start_time_unix_nano,
                            "end_time_unix_nano": span.end_time_unix_nano,
                        }
                    )
        self._sink(spans)
        return trace_service_pb2.ExportTraceServiceResponse()


def _points(metric: Any) -> list[tuple[str, Any]]:
    kind = metric.WhichOneof("data")
    if kind in ("sum", "gauge"):
        return [(kind, p) for p in getattr(metric, kind).data_points]
    if kind == "histogram":
        return [(kind, p) for p in metric.histogram.data_points]
    return []  # exponential histograms and summaries: not produced here


class _MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, sink: Callable[[list[PointDict]], None]) -> None:
        self._sink = sink

    def Export(self, request, context):  # noqa: N802 - gRPC method name
        points: list[PointDict] = []
        for resource_metrics in request.resource_metrics:
            resource = _attributes(resource_metrics.resource.attributes)
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    for kind, point in _points(metric):
                        entry: PointDict = {
                            "name": metric.name,
                            "unit": metric.unit,
                            "kind": kind,
                            "service_name": resource.get("service.name", ""),
                            "scope": scope_metrics.scope.name,
                            "attributes": _attributes(point.attributes),
                            "time_unix_nano": point.time_unix_nano,
                        }
                        if kind == "histogram":
                            entry.update(count=point.count, sum=point.sum,
                                         bucket_counts=list(point.bucket_counts),
                                         explicit_bounds=list(point.explicit_bounds))
                        else:
                            entry["value"] = point.WhichOneof("value") and getattr(
                                point, point.WhichOneof("value"))
                        points.append(entry)
        self._sink(points)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class OtlpReceiver:
    """An OTLP/gRPC trace and metrics endpoint on 127.0.0.1 (ephemeral port) that keeps what it
    receives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[SpanDict] = []
        self._points: list[PointDict] = []
        self._server: grpc.Server | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> OtlpReceiver:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
            _TraceService(self._store), server
        )
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
            _MetricsService(self._store_points), server
        )
        self.port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(None).wait()
            self._server = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _store(self, spans: list[SpanDict]) -> None:
        with self._lock:
            self._spans.extend(spans)

    def _store_points(self, points: list[PointDict]) -> None:
        with self._lock:
            self._points.extend(points)

    def metric_points(self) -> list[PointDict]:
        """Every metric data point received so far, in arrival order (cumulative temporality, so
        the latest point of a series holds its running total)."""
        with self._lock:
            return list(self._points)

    def wait_for_metrics(self, predicate: Callable[[list[PointDict]], Any], timeout: float = 10.0,
                         interval: float = 0.1) -> Any:
        """Like `wait_for`, over the metric points received."""
        deadline = time.monotonic() + timeout
        while True:
            result = predicate(self.metric_points())
            if result:
                return result
            if time.monotonic() >= deadline:
                names = sorted({f"{p['service_name']}:{p['name']}" for p in self.metric_points()})
                raise AssertionError(
                    f"no matching metric points within {timeout:.1f}s; received: {names or 'none'}"
                )
            time.sleep(interval)

    def spans(self) -> list[SpanDict]:
        """Every span received so far, in arrival order."""
        with self._lock:
            return list(self._spans)

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()
            self._points.clear()

    def wait_for(
        self,
        predicate: Callable[[list[SpanDict]], Any],
        timeout: float = 10.0,
        interval: float = 0.05,
    ) -> Any:
        """Poll until `predicate(spans)` is truthy and return its value; AssertionError on timeout.

        The deadline only bounds the wait: a test passes because the predicate held, never
        because time passed.
        """
        deadline = time.monotonic() + timeout
        while True:
            result = predicate(self.spans())
            if result:
                return result
            if time.monotonic() >= deadline:
                names = sorted({f"{s['service_name']}:{s['name']}" for s in self.spans()})
                raise AssertionError(
                    f"no matching spans within {timeout:.1f}s; received: {names or 'none'}"
                )
            time.sleep(interval)
