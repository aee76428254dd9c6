"""MetricsBackend over the Prometheus HTTP API (`GET /api/v1/query_range`; the catalogue of
services from `GET /api/v1/label/<service label>/values` over the longest window a tool may ask).

The PromQL is built, never passed through: `max by (__name__) ({service="<s>"})` (the service
label is a setting, several tried in turn), or with
`__name__="<metric>"` added for one metric. Label values are PromQL string literals with `\\`,
`"` and line breaks escaped, so a value can never end the selector. `max by (__name__)` gives one
series per metric whatever the instance labels, and keeps peaks, as the SQL backend does. Units
come from the metric name's suffix (Prometheus naming conventions), since the API carries none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone
from urllib.parse import quote

from services.executor.tools.backends import BackendError, MetricSeries, utc_now
from services.executor.tools.backend_readiness import PROMETHEUS, Readiness, probe
from services.executor.tools.http_api import HttpConnection, get_api_json, get_api_strings, make_client
from services.executor.tools.prometheus_signals import SeriesReading
from services.executor.tools.tool_arguments import MAX_WINDOW

_UNIT_SUFFIXES = (
    ("_percent", "percent"), ("_ratio", "ratio"), ("_ms", "ms"), ("_milliseconds", "ms"), ("_seconds", "seconds"),
    ("_bytes", "bytes"), ("_per_second", "per_second"), ("_total", "count"), ("_count", "count"),
)


def promql_string(value: str) -> str:
    """`value` as a double-quoted PromQL string literal."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def unit_from_metric_name(metric: str) -> str:
    name = metric.lower()
    return next((unit for suffix, unit in _UNIT_SUFFIXES if name.endswith(suffix)), "")


class PrometheusMetricsBackend:
    """`service_labels` are tried in turn (`service`, then e.g. `job`, `app`): the first that has
    series for the service answers. `min_step_seconds` (the scrape interval, say) is the finest
    resolution ever asked for."""

    def __init__(
        self,
        connection: str | HttpConnection,
        timeout_seconds: float = 10.0,
        service_labels: Sequence[str] = ("service",),
        min_step_seconds: int | None = None,
        reading: SeriesReading | None = None,
    ) -> None:
        if isinstance(connection, str):
            connection = HttpConnection(connection, timeout_seconds)
        if not service_labels:
            raise ValueError("at least one service label is needed")
        self._connection = connection
        self.source_name = f"prometheus:{connection.display_url}"
        self._client = make_client(connection)
        self._timeout = connection.timeout_seconds
        self._service_labels = tuple(service_labels)
        self._min_step = min_step_seconds
        self._reading = reading or SeriesReading()

    def readiness(self) -> Readiness:
        """Build info and `/-/ready` (WrongBackendError when the URL is not a Prometheus API)."""
        return probe(self._client, PROMETHEUS, self._connection.display_url)

    def service_names(self) -> list[str]:
        """Every value of the service labels on series with samples in the last MAX_WINDOW."""
        end = utc_now()
        names: set[str] = set()
        for label in self._service_labels:
            names.update(get_api_strings(
                self._client, "prometheus label values", f"/api/v1/label/{quote(label, safe='')}/values",
                {"start": f"{(end - MAX_WINDOW).timestamp():.3f}", "end": f"{end.timestamp():.3f}"},
            ))
        return sorted(names)

    def promql(self, service: str, metric: str | None, service_label: str | None = None) -> str:
        matchers = []
        if metric is not None:
            matchers.append(f"__name__={promql_string(metric)}")
        matchers.append(f"{service_label or self._service_labels[0]}={promql_string(service)}")
        return f"max by (__name__) ({{{', '.join(matchers)}}})"

    def query_range(
        self, service: str, metric: str | None, start: datetime, end: datetime, step_seconds: int
    ) -> list[MetricSeries]:
        step = max(int(step_seconds), self._min_step or 0)
        series: list[MetricSeries] = []
        for label in self._service_labels:  # in turn: the first label with series answers
            series = self._query_range(self.promql(service, metric, label), metric, start, end, step)
            if series:
                break
        return series

    def _query_range(
        self, query: str, metric: str | None, start: datetime, end: datetime, step_seconds: int
    ) -> list[MetricSeries]:
        data = get_api_json(self._client, "prometheus query_range", "/api/v1/query_range", {
            "query": query,
            "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}",
            "step": f"{int(step_seconds)}s",
            "timeout": f"{self._timeout:g}s",  # Prometheus stops evaluating too
        })
        if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
            raise BackendError(f"prometheus query_range: expected a matrix result, got {data.get('resultType')!r}")
        series: list[MetricSeries] = []
        for item in data["result"]:
            labels = item.get("metric") or {}
            name = str(labels.get("__name__") or metric or "")
            points: list[tuple[datetime, float]] = []
            for pair in item.get("values") or []:
                try:
                    ts, value = float(pair[0]), float(pair[1])
                except (TypeError, ValueError, IndexError):
                    raise BackendError("prometheus query_range: a sample is not [time, \"value\"]") from None
                if math.isfinite(value):  # NaN and ±Inf are not measurements
                    points.append((datetime.fromtimestamp(ts, tz=timezone.utc), value))
            if name and points:
                series.append(MetricSeries(metric=name, unit=unit_from_metric_name(name), points=points))
        return series

    def close(self) -> None:
        self._client.close()
