"""MetricsBackend over the Prometheus HTTP API, read the way an SRE reads it.

One call for one service: its series are listed (`GET /api/v1/series` over the window, the
service label a setting, several tried in turn), typed (`GET /api/v1/metadata`, cached, with the
naming conventions as the fallback) and read by type (`prometheus_signals`: rates of counters,
quantiles of histograms, error ratios, gauges per instance), golden signals first, each with one
`GET /api/v1/query_range`. The PromQL is built, never passed through: label values are PromQL
string literals with `\\`, `"` and line breaks escaped, so a value can never end the selector.
At most MAX_QUERIES series are read per call; the others are returned unread (`examined=False`)
so the answer can say how many were not examined.

The rate window is at least two steps and four times the finest step (the scrape interval, when
`ATTEST_PROMETHEUS_STEP_SECONDS` says it), and never under a minute.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from services.executor.tools.backend_readiness import PROMETHEUS, Readiness, probe
from services.executor.tools.backends import BackendError, MetricSeries, utc_now
from services.executor.tools.http_api import (
    HttpConnection,
    get_api_data,
    get_api_json,
    get_api_strings,
    make_client,
)
from services.executor.tools.prometheus_signals import (
    SeriesReading,
    combine,
    families,
    matching,
    signal_queries,
    unit_of,
)
from shared.core.tool_catalogue import MAX_WINDOW

log = logging.getLogger(__name__)

MAX_QUERIES = 40  # series read per call; the rest are returned unread
METADATA_TTL_SECONDS = 300.0
MIN_RANGE_SECONDS = 60


def promql_string(value: str) -> str:
    """`value` as a double-quoted PromQL string literal."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def unit_from_metric_name(metric: str) -> str:
    """The unit of a raw series by its name (counters count)."""
    unit = unit_of(metric)
    return unit or ("count" if metric.lower().endswith(("_total", "_count")) else "")


def rate_range_seconds(step_seconds: int, min_step_seconds: int | None) -> int:
    return max(2 * step_seconds, 4 * (min_step_seconds or 0), MIN_RANGE_SECONDS)


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
        self._metadata_lock = threading.Lock()
        self._metadata: tuple[float, Mapping[str, Any]] | None = None

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

    def label_values(self) -> tuple[str, list[str]]:
        """The service labels (as written, `service/job`) and every value they hold over the
        longest window a tool may ask: what a call that found no series compares its name with."""
        return "/".join(self._service_labels), self.service_names()

    def step_for(self, step_seconds: int) -> int:
        """The step a call asked for `step_seconds` is answered at."""
        return max(int(step_seconds), self._min_step or 0)

    def query_range(
        self, service: str, metric: str | None, start: datetime, end: datetime, step_seconds: int
    ) -> list[MetricSeries]:
        step = self.step_for(step_seconds)
        for label in self._service_labels:  # in turn: the first label with series answers
            selector = f"{label}={promql_string(service)}"
            labelsets = self._series(selector, start, end)
            if labelsets:
                break
        else:
            return []
        queries = signal_queries(families(labelsets, self._metadata_map()), self._reading, promql_string)
        if metric is not None:
            queries = matching(queries, metric)
        range_ = f"{rate_range_seconds(step, self._min_step)}s"
        series: list[MetricSeries] = []
        for query in queries[:MAX_QUERIES]:
            promql = query.promql(selector, range_)
            points, top = combine(query, self._matrix(promql, start, end, step))
            if points:
                series.append(MetricSeries(query.name, query.unit, points, query.signal, promql, top))
        series += [MetricSeries(q.name, q.unit, [], q.signal, examined=False) for q in queries[MAX_QUERIES:]]
        return series

    def _series(self, selector: str, start: datetime, end: datetime) -> list[dict[str, str]]:
        data = get_api_data(self._client, "prometheus series", "/api/v1/series", {
            "match[]": "{" + selector + "}",
            "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}",
        })
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise BackendError("prometheus series: unexpected response (data is not a list of label sets)")
        return [{str(k): str(v) for k, v in item.items()} for item in data]

    def _metadata_map(self) -> Mapping[str, Any]:
        """`/api/v1/metadata`, cached; when it cannot be read, names decide the types."""
        with self._metadata_lock:
            now = time.monotonic()
            if self._metadata is not None and now - self._metadata[0] < METADATA_TTL_SECONDS:
                return self._metadata[1]
            try:
                data = get_api_json(self._client, "prometheus metadata", "/api/v1/metadata", {})
            except BackendError as exc:
                log.warning("metric metadata unavailable, types follow the naming conventions: %s", exc)
                data = {}
            cleaned = {name: [e for e in entries if isinstance(e, dict)] for name, entries in data.items()
                       if isinstance(entries, list)}
            self._metadata = (now, cleaned)
            return cleaned

    def _matrix(
        self, query: str, start: datetime, end: datetime, step_seconds: int
    ) -> list[tuple[dict[str, str], list[tuple[datetime, float]]]]:
        data = get_api_json(self._client, "prometheus query_range", "/api/v1/query_range", {
            "query": query,
            "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}",
            "step": f"{int(step_seconds)}s",
            "timeout": f"{self._timeout:g}s",  # Prometheus stops evaluating too
        })
        if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
            raise BackendError(f"prometheus query_range: expected a matrix result, got {data.get('resultType')!r}")
        parts: list[tuple[dict[str, str], list[tuple[datetime, float]]]] = []
        for item in data["result"]:
            labels = item.get("metric") or {}
            points: list[tuple[datetime, float]] = []
            for pair in item.get("values") or []:
                try:
                    ts, value = float(pair[0]), float(pair[1])
                except (TypeError, ValueError, IndexError):
                    raise BackendError("prometheus query_range: a sample is not [time, \"value\"]") from None
                if math.isfinite(value):  # NaN (0/0, no traffic) and ±Inf are not measurements
                    points.append((datetime.fromtimestamp(ts, tz=UTC), value))
            if points:
                parts.append(({str(k): str(v) for k, v in labels.items()}, points))
        return parts

    def close(self) -> None:
        self._client.close()
