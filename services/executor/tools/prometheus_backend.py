"""MetricsBackend over the Prometheus HTTP API (`GET /api/v1/query_range`; the catalogue of
services from `GET /api/v1/label/<service label>/values` over the longest window a tool may ask).

The PromQL is built, never passed through: `max by (__name__) ({service="<s>"})`, or with
`__name__="<metric>"` added for one metric. Label values are PromQL string literals with `\\`,
`"` and line breaks escaped, so a value can never end the selector. `max by (__name__)` gives one
series per metric whatever the instance labels, and keeps peaks, as the SQL backend does. Units
come from the metric name's suffix (Prometheus naming conventions), since the API carries none.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from urllib.parse import quote

from services.executor.tools.backends import BackendError, MetricSeries, utc_now
from services.executor.tools.http_api import get_api_json, get_api_strings, make_client
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
    def __init__(self, base_url: str, timeout_seconds: float = 10.0, service_label: str = "service") -> None:
        self.source_name = f"prometheus:{base_url.rstrip('/')}"
        self._client = make_client(base_url, timeout_seconds)
        self._timeout = timeout_seconds
        self._service_label = service_label

    def service_names(self) -> list[str]:
        """Every value of the service label on series with samples in the last MAX_WINDOW."""
        end = utc_now()
        return sorted(set(get_api_strings(
            self._client, "prometheus label values", f"/api/v1/label/{quote(self._service_label, safe='')}/values",
            {"start": f"{(end - MAX_WINDOW).timestamp():.3f}", "end": f"{end.timestamp():.3f}"},
        )))

    def promql(self, service: str, metric: str | None) -> str:
        matchers = []
        if metric is not None:
            matchers.append(f"__name__={promql_string(metric)}")
        matchers.append(f"{self._service_label}={promql_string(service)}")
        return f"max by (__name__) ({{{', '.join(matchers)}}})"

    def query_range(
        self, service: str, metric: str | None, start: datetime, end: datetime, step_seconds: int
    ) -> list[MetricSeries]:
        data = get_api_json(self._client, "prometheus query_range", "/api/v1/query_range", {
            "query": self.promql(service, metric),
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
