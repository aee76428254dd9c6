"""The Prometheus and Loki adapters against a real HTTP server on 127.0.0.1 that speaks the two
APIs' documented response formats (matrix and streams results, `status: error` bodies), and
evaluates the selectors it receives, so that what the adapters build is checked by what the
server finds with it."""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from services.executor.tools.backend_factory import build_backends
from services.executor.tools.backends import BackendError, ToolBackends
from services.executor.tools.changes_backend import SqlChangesBackend
from services.executor.tools.knowledge_backend import MarkdownKnowledgeBase
from services.executor.tools.loki_backend import LokiLogsBackend
from services.executor.tools.prometheus_backend import PrometheusMetricsBackend, promql_string, unit_from_metric_name
from services.executor.tools.registry import ToolBackendError, build_default_registry
from services.executor.tools.sql_backends import SqlLogsBackend, SqlMetricsBackend
from shared.config import ExecutorSettings
from tests.recorded_loki import parse_log_query

START = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
END = START + timedelta(minutes=30)
_MATCHER = re.compile(r'(\w+)\s*(=~|=)\s*"((?:[^"\\]|\\.)*)"')


def _unquote(value: str) -> str:
    """A PromQL/LogQL double-quoted string's value (the escapes the adapters produce)."""
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "r": "\r"}.get(m.group(1), m.group(1)), value)


def _matchers(selector: str) -> list[tuple[str, str, str]]:
    return [(name, op, _unquote(value)) for name, op, value in _MATCHER.findall(selector)]


def _selects(matchers: list[tuple[str, str, str]], labels: dict[str, str]) -> bool:
    for name, op, value in matchers:
        actual = labels.get(name, "")
        if op == "=" and actual != value:
            return False
        if op == "=~" and not re.fullmatch(value, actual):
            return False
    return True


class FakeMonitoring:
    """Series and log lines in memory, served as Prometheus and Loki would serve them."""

    def __init__(self) -> None:
        self.series: list[tuple[dict[str, str], object]] = []  # labels, value(ts) -> float
        self.lines: list[tuple[dict[str, str], datetime, str]] = []
        self.queries: list[dict[str, str]] = []
        self.mode = "ok"  # ok | bad_data | http_502 | slow | not_json
        self.slow_seconds = 2.0

    # --- Prometheus ---------------------------------------------------------------------------
    def query_range(self, params: dict[str, str]) -> tuple[int, object]:
        """Only the gauge reading (`max [by (<labels>)] (<name>{<matchers>})`): PromQL itself is
        the real Prometheus' business (tests/integration/test_prometheus_reading.py)."""
        match = re.fullmatch(r"max(?: by \(([^)]*)\) )?\((\w+)\{(.*)\}\)", params["query"], re.S)
        if match is None:
            return 400, {"status": "error", "errorType": "bad_data", "error": f"parse error: {params['query']}"}
        by = [label.strip() for label in (match.group(1) or "").split(",") if label.strip()]
        matchers = [("__name__", "=", match.group(2)), *_matchers(match.group(3))]
        start, end = float(params["start"]), float(params["end"])
        step = float(params["step"].rstrip("s"))
        groups: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
        for labels, value in self.series:
            if not _selects(matchers, labels):
                continue
            key = tuple((label, labels[label]) for label in by if label in labels)
            ts = start
            while ts <= end:
                sample = value(ts)  # type: ignore[operator]
                samples = groups.setdefault(key, {})
                samples[ts] = max(samples.get(ts, float("-inf")), sample)
                ts += step
        result = [
            {"metric": dict(key), "values": [[ts, repr(v) if v == v else "NaN"] for ts, v in sorted(samples.items())]}
            for key, samples in sorted(groups.items())
        ]
        return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}

    def prometheus_series(self, params: dict[str, str]) -> tuple[int, object]:
        match = re.fullmatch(r"\{(.*)\}", params["match[]"], re.S)
        assert match, params["match[]"]
        matchers = _matchers(match.group(1))
        found = {json.dumps(labels, sort_keys=True) for labels, _ in self.series if _selects(matchers, labels)}
        return 200, {"status": "success", "data": [json.loads(item) for item in sorted(found)]}

    # --- Loki -----------------------------------------------------------------------------------
    def _log_filter(self, query: str):
        """The LogQL subset of tests/recorded_loki.py: every matcher and line filter applied."""
        parsed = parse_log_query(query)
        return lambda labels, line: parsed.selects_stream(labels) and parsed.keeps_line(line)

    def loki_range(self, params: dict[str, str]) -> tuple[int, object]:
        keep = self._log_filter(params["query"])
        start, end = int(params["start"]), int(params["end"])
        limit = int(params["limit"])
        hits = [
            (labels, ts, line) for labels, ts, line in self.lines
            if keep(labels, line) and start <= _ns(ts) <= end
        ]
        hits.sort(key=lambda h: h[1], reverse=params.get("direction") == "backward")
        streams: dict[str, dict] = {}
        for labels, ts, line in hits[:limit]:
            key = json.dumps(labels, sort_keys=True)
            streams.setdefault(key, {"stream": labels, "values": []})["values"].append([str(_ns(ts)), line])
        return 200, {"status": "success", "data": {"resultType": "streams", "result": list(streams.values()), "stats": {}}}

    def prometheus_label_values(self, label: str, params: dict[str, str]) -> tuple[int, object]:
        # Every series here has samples at all times, so [start, end] selects them all.
        assert float(params["start"]) < float(params["end"])
        values = sorted({labels[label] for labels, _ in self.series if label in labels})
        return 200, {"status": "success", "data": values}

    def loki_label_values(self, label: str, params: dict[str, str]) -> tuple[int, object]:
        start, end = int(params["start"]), int(params["end"])
        values = sorted({labels[label] for labels, ts, _ in self.lines if label in labels and start <= _ns(ts) <= end})
        return 200, {"status": "success", "data": values}

    def loki_instant(self, params: dict[str, str]) -> tuple[int, object]:
        match = re.fullmatch(r"sum\(count_over_time\((.*) \[(\d+)ms\]\)\)", params["query"], re.S)
        assert match, params["query"]
        keep = self._log_filter(match.group(1))
        at = int(params["time"])
        since = at - int(match.group(2)) * 1_000_000
        count = sum(1 for labels, ts, line in self.lines if keep(labels, line) and since < _ns(ts) <= at)
        result = [{"metric": {}, "value": [at / 1e9, str(count)]}] if count else []
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}


def _ns(moment: datetime) -> int:
    return int(round(moment.timestamp() * 1_000_000)) * 1000


@pytest.fixture()
def server():
    fake = FakeMonitoring()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urlparse(self.path)
            params = {k: v[-1] for k, v in parse_qs(url.query).items()}
            fake.queries.append({"path": url.path, **params})
            if fake.mode == "slow":
                time.sleep(fake.slow_seconds)
            if fake.mode == "http_502":
                self._send(502, b"<html>502 Bad Gateway</html>", "text/html")
                return
            if fake.mode == "not_json":
                self._send(200, b"it works", "text/plain")
                return
            if fake.mode == "bad_data":
                status, body = 422, {"status": "error", "errorType": "execution", "error": "query processing would load too many samples"}
            elif url.path == "/api/v1/query_range":
                status, body = fake.query_range(params)
            elif url.path == "/api/v1/series":
                status, body = fake.prometheus_series(params)
            elif url.path == "/api/v1/metadata":
                status, body = 200, {"status": "success", "data": {}}
            elif url.path == "/loki/api/v1/query_range":
                status, body = fake.loki_range(params)
            elif url.path == "/loki/api/v1/query":
                status, body = fake.loki_instant(params)
            elif label := re.fullmatch(r"/api/v1/label/(\w+)/values", url.path):
                status, body = fake.prometheus_label_values(label.group(1), params)
            elif label := re.fullmatch(r"/loki/api/v1/label/(\w+)/values", url.path):
                status, body = fake.loki_label_values(label.group(1), params)
            else:
                status, body = 404, {"status": "error", "errorType": "not_found", "error": url.path}
            self._send(status, json.dumps(body).encode(), "application/json")

        def _send(self, status: int, payload: bytes, content_type: str) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (the timeout tests)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}"  # type: ignore[attr-defined]
    yield fake
    httpd.shutdown()
    httpd.server_close()


# --- Prometheus ---------------------------------------------------------------------------------


def test_prometheus_gauges_are_read_per_instance_and_the_top_instance_is_named(server) -> None:
    base = START.timestamp()
    server.series += [
        ({"__name__": "cpu_usage_percent", "service": "pay-svc", "instance": "a"}, lambda ts: 30 + (ts - base) / 60),
        ({"__name__": "cpu_usage_percent", "service": "pay-svc", "instance": "b"}, lambda ts: 50.0),
        ({"__name__": "p99_latency_ms", "service": "pay-svc", "instance": "a"}, lambda ts: float("nan") if ts == base else 180.0),
        ({"__name__": "cpu_usage_percent", "service": "other-svc", "instance": "a"}, lambda ts: 99.0),
    ]
    backend = PrometheusMetricsBackend(server.url, timeout_seconds=5)
    series = {s.metric: s for s in backend.query_range("pay-svc", None, START, END, 60)}
    assert set(series) == {"cpu_usage_percent", "p99_latency_ms"}
    cpu = series["cpu_usage_percent"]
    assert cpu.unit == "percent" and len(cpu.points) == 31 and cpu.signal == "saturation"
    assert cpu.points[0] == (START, 50.0) and cpu.points[-1] == (END, 60.0)  # the highest instance at each step
    assert cpu.top is not None and (cpu.top.label, cpu.top.value, cpu.top.level, cpu.top.instances) == ("instance", "a", 60.0, 2)
    assert all(ts.tzinfo is not None for ts, _ in cpu.points)
    assert len(series["p99_latency_ms"].points) == 30 and series["p99_latency_ms"].unit == "ms"  # NaN dropped
    listed = next(q for q in server.queries if q["path"] == "/api/v1/series")
    assert listed["match[]"] == '{service="pay-svc"}'
    sent = [q for q in server.queries if q["path"] == "/api/v1/query_range"]
    assert {q["step"] for q in sent} == {"60s"}
    assert float(sent[0]["start"]) == START.timestamp() and float(sent[0]["end"]) == END.timestamp()
    assert {q["query"] for q in sent} == {
        'max by (instance) (cpu_usage_percent{service="pay-svc"})', 'max by (instance) (p99_latency_ms{service="pay-svc"})',
    }


def test_prometheus_label_values_are_escaped_so_they_cannot_leave_the_selector(server) -> None:
    hostile = 'pay"} or vector(1) or {x="\\'
    server.series.append(({"__name__": "cpu_usage_percent", "service": hostile}, lambda ts: 12.0))
    server.series.append(({"__name__": "cpu_usage_percent", "service": "pay"}, lambda ts: 99.0))
    backend = PrometheusMetricsBackend(server.url, timeout_seconds=5)
    series = backend.query_range(hostile, "cpu_usage_percent", START, END, 300)
    assert [s.metric for s in series] == ["cpu_usage_percent"]
    assert {v for _, v in series[0].points} == {12.0}  # the hostile value matched only itself
    assert server.queries[-1]["query"] == f"max(cpu_usage_percent{{service={promql_string(hostile)}}})"


def test_a_service_without_series_gets_the_close_label_values(server) -> None:
    server.series.append(({"__name__": "http_5xx_rate", "service": "pay-svc"}, lambda ts: 0.5))
    registry = build_default_registry(ToolBackends(metrics=PrometheusMetricsBackend(server.url, 5), logs=None))  # type: ignore[arg-type]
    result = registry.invoke("query_metrics", {"service": "pay-svcc", "start": START.isoformat(), "end": END.isoformat()})
    assert result.evidence_status == "NO_EVIDENCE"
    summary = next(ref.text for ref in result.evidence_refs() if ref.raw_path == "summary")
    assert summary.endswith("0 series, 0 points; Prometheus has no series with service=pay-svcc in this window (close values: pay-svc)")
    assert json.loads(result.agent_result)["absent"] == {
        "backend": "Prometheus", "label": "service", "elsewhere": False, "close_values": ["pay-svc"],
    }


def test_prometheus_through_the_tool_gives_point_refs(server) -> None:
    server.series.append(({"__name__": "http_5xx_rate", "service": "pay-svc"}, lambda ts: 0.5))
    registry = build_default_registry(ToolBackends(metrics=PrometheusMetricsBackend(server.url, 5), logs=None))  # type: ignore[arg-type]
    result = registry.invoke("query_metrics", {"service": "pay-svc", "start": START.isoformat(), "end": END.isoformat()})
    refs = {ref.raw_path: ref for ref in result.evidence_refs()}
    assert result.evidence_status == "EVIDENCE_FOUND"
    assert refs["series[0].points[0]"].text == "pay-svc http_5xx_rate=0.5 at 2026-11-29T10:00:00Z"
    assert refs["series[0].points[0]"].source == f"prometheus:{server.url}"


@pytest.mark.parametrize("mode, fragment", [
    ("bad_data", "HTTP 422 execution: query processing would load too many samples"),
    ("http_502", "HTTP 502"),
    ("not_json", "unexpected response"),
])
def test_prometheus_errors_become_backend_errors(server, mode: str, fragment: str) -> None:
    server.mode = mode
    with pytest.raises(BackendError, match=re.escape(fragment)):
        PrometheusMetricsBackend(server.url, timeout_seconds=5).query_range("pay-svc", None, START, END, 60)


def test_a_slow_prometheus_hits_the_timeout_and_the_tool_reports_an_error(server) -> None:
    server.mode = "slow"
    registry = build_default_registry(ToolBackends(metrics=PrometheusMetricsBackend(server.url, 0.3), logs=None))  # type: ignore[arg-type]
    began = time.monotonic()
    with pytest.raises(ToolBackendError, match=r"no response within 0.3s"):
        registry.invoke("query_metrics", {"service": "pay-svc", "start": START.isoformat(), "end": END.isoformat()})
    assert time.monotonic() - began < server.slow_seconds  # it gave up, it did not wait


def test_an_unreachable_prometheus_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="request failed"):
        PrometheusMetricsBackend("http://127.0.0.1:9", timeout_seconds=2).query_range("pay-svc", None, START, END, 60)


@pytest.mark.parametrize("metric, unit", [
    ("cpu_usage_percent", "percent"), ("http_server_duration_seconds", "seconds"), ("queue_lag_messages", ""),
    ("process_resident_memory_bytes", "bytes"), ("http_requests_total", "count"), ("p99_latency_ms", "ms"),
    ("process_cpu_seconds_total", "seconds"),
])
def test_units_follow_prometheus_naming_conventions(metric: str, unit: str) -> None:
    assert unit_from_metric_name(metric) == unit


# --- Loki -----------------------------------------------------------------------------------------


def _lines(server, count: int = 6) -> None:
    for k in range(count):
        level = "ERROR" if k % 2 else "INFO"
        server.lines.append((
            {"service": "pay-svc", "level": level, "pod": f"pay-{k % 2}"},
            START + timedelta(minutes=k, seconds=30, microseconds=123456),
            f"request {k} failed: upstream a.b(c) timed out" if level == "ERROR" else f"request {k} ok",
        ))
    server.lines.append(({"service": "other-svc", "level": "ERROR", "pod": "o-0"}, START + timedelta(minutes=1), "other failure"))


def test_loki_streams_become_records_in_time_order_with_counts(server) -> None:
    _lines(server)
    backend = LokiLogsBackend(server.url, timeout_seconds=5)
    result = backend.query_range("pay-svc", START, END, ["ERROR", "WARN"], None, 2)
    assert result.total_matches == 3  # all matching lines, not only the two returned
    # More matched than the limit: the oldest and the newest, dated from the whole window.
    assert [r.message for r in result.records] == ["request 1 failed: upstream a.b(c) timed out", "request 5 failed: upstream a.b(c) timed out"]
    first = result.records[0]
    assert first.ts == START + timedelta(minutes=1, seconds=30, microseconds=123456)  # nanoseconds both ways
    assert (first.level, first.host, first.service) == ("ERROR", "pay-1", "pay-svc")
    assert (result.first_ts, result.last_ts) == (first.ts, result.records[-1].ts)
    assert (result.window_lines, result.unclassified_lines) == (6, 0)
    sent = [q for q in server.queries if q["path"] == "/loki/api/v1/query_range"]
    assert sent[0]["query"].startswith('{service="pay-svc", level=~"(?i)(')  # the lines labelled ERROR or WARN
    assert {q["direction"] for q in sent} == {"forward", "backward"}
    assert sent[0]["start"] == str(_ns(START)) and sent[0]["end"] == str(_ns(END))


def test_loki_contains_is_a_literal_case_insensitive_line_filter(server) -> None:
    _lines(server)
    server.lines.append(({"service": "pay-svc", "level": "ERROR"}, START + timedelta(minutes=9), "upstream aXb(c) timed out"))
    backend = LokiLogsBackend(server.url, timeout_seconds=5)
    result = backend.query_range("pay-svc", START, END, None, "UPSTREAM A.B(C)", 50)
    # '.' and '(' are literal: "aXb(c)" does not match; the case does not matter.
    assert result.total_matches == 3 and all("a.b(c)" in r.message for r in result.records)
    hostile = backend.query_range("pay-svc", START, END, None, '") or {service=~".+', 50)
    assert hostile.total_matches == 0 and hostile.records == []


def test_loki_through_the_tool_gives_hit_refs_and_a_slow_loki_is_an_error(server) -> None:
    _lines(server)
    registry = build_default_registry(ToolBackends(metrics=None, logs=LokiLogsBackend(server.url, 0.3)))  # type: ignore[arg-type]
    result = registry.invoke("query_logs", {"service": "pay-svc", "start": START.isoformat(), "end": END.isoformat(), "level": "ERROR"})
    refs = {ref.raw_path: ref.text for ref in result.evidence_refs()}
    assert refs["hits[0]"] == "2026-11-29T10:01:30Z ERROR pay-svc host=pay-1 request 1 failed: upstream a.b(c) timed out"
    assert ": 3 matching lines, first at 2026-11-29T10:01:30Z, last at 2026-11-29T10:05:30Z" in refs["summary"]
    server.mode = "slow"
    with pytest.raises(ToolBackendError, match="no response within"):
        registry.invoke("query_logs", {"service": "pay-svc", "start": START.isoformat(), "end": END.isoformat()})


def test_loki_error_status_is_a_backend_error(server) -> None:
    server.mode = "bad_data"
    with pytest.raises(BackendError, match="loki (count|query_range): HTTP 422 execution"):
        LokiLogsBackend(server.url, timeout_seconds=5).query_range("pay-svc", START, END, None, None, 10)


# --- the catalogue of services (label values) ------------------------------------------------------


def test_prometheus_lists_its_services_from_the_label_values_api(server) -> None:
    server.series += [
        ({"__name__": "cpu_usage_percent", "service": "pay-svc"}, lambda ts: 1.0),
        ({"__name__": "p99_latency_ms", "service": "pay-svc"}, lambda ts: 1.0),
        ({"__name__": "cpu_usage_percent", "service": "ledger-api"}, lambda ts: 1.0),
        ({"__name__": "up", "job": "node"}, lambda ts: 1.0),
    ]
    assert PrometheusMetricsBackend(server.url, timeout_seconds=5).service_names() == ["ledger-api", "pay-svc"]
    sent = server.queries[-1]
    assert sent["path"] == "/api/v1/label/service/values"
    assert float(sent["end"]) - float(sent["start"]) == pytest.approx(7 * 24 * 3600, abs=1)


def test_loki_lists_its_services_from_the_label_values_api(server) -> None:
    now = datetime.now(UTC)
    server.lines += [
        ({"service": "pay-svc", "level": "INFO"}, now - timedelta(hours=1), "ok"),
        ({"service": "queue-worker", "level": "ERROR"}, now - timedelta(days=2), "failed"),
        ({"service": "retired-svc", "level": "INFO"}, now - timedelta(days=30), "too old for any tool window"),
    ]
    assert LokiLogsBackend(server.url, timeout_seconds=5).service_names() == ["pay-svc", "queue-worker"]
    assert server.queries[-1]["path"] == "/loki/api/v1/label/service/values"


@pytest.mark.parametrize("mode, fragment", [("bad_data", "HTTP 422"), ("not_json", "unexpected response")])
def test_label_values_errors_are_backend_errors(server, mode: str, fragment: str) -> None:
    server.mode = mode
    for backend in (PrometheusMetricsBackend(server.url, 5), LokiLogsBackend(server.url, 5)):
        with pytest.raises(BackendError, match=fragment):
            backend.service_names()


def test_a_label_values_body_that_is_not_a_list_of_strings_is_a_backend_error(server) -> None:
    server.mode = "ok"
    server.prometheus_label_values = lambda label, params: (200, {"status": "success", "data": {"resultType": "x"}})
    with pytest.raises(BackendError, match="not a list of strings"):
        PrometheusMetricsBackend(server.url, 5).service_names()


def test_the_catalogue_of_prometheus_and_loki_resolves_names_with_close_matches(server) -> None:
    from services.executor.service_catalogue import catalogue_of, resolve_services

    server.series.append(({"__name__": "cpu_usage_percent", "service": "billing-api"}, lambda ts: 1.0))
    server.lines.append(({"service": "invoice-worker"}, datetime.now(UTC), "ok"))
    catalogue = catalogue_of(ToolBackends(metrics=PrometheusMetricsBackend(server.url, 5),
                                          logs=LokiLogsBackend(server.url, 5))).snapshot()
    assert catalogue.available and catalogue.names == {"billing-api", "invoice-worker"}
    coverage = resolve_services(["invoice-worker", "biling-api", "nothing-like-it"], catalogue, 10).coverage
    assert coverage.checked == ["invoice-worker"]
    assert [(u.name, u.suggestions) for u in coverage.unknown] == [("biling-api", ["billing-api"]), ("nothing-like-it", [])]
    server.mode = "http_502"
    assert catalogue_of(ToolBackends(metrics=PrometheusMetricsBackend(server.url, 5), logs=None)).snapshot().available is False  # type: ignore[arg-type]


# --- choosing backends from settings ----------------------------------------------------------


def test_settings_choose_prometheus_and_loki_when_set_and_sql_otherwise(tmp_path: Path) -> None:
    estate = f"sqlite:///{tmp_path / 'estate.db'}"
    changes = f"sqlite:///{tmp_path / 'changes.db'}"
    knowledge = tmp_path / "kb"
    knowledge.mkdir()
    remote = build_backends(ExecutorSettings(
        estate_database_url=estate, prometheus_url="http://127.0.0.1:9090", loki_url="http://127.0.0.1:3100",
        changes_database_url=changes, knowledge_dir=str(knowledge), backend_timeout_seconds=2.5,
    ))
    assert isinstance(remote.metrics, PrometheusMetricsBackend) and isinstance(remote.logs, LokiLogsBackend)
    assert isinstance(remote.changes, SqlChangesBackend) and str(remote.changes._engine.url) == changes
    assert isinstance(remote.knowledge, MarkdownKnowledgeBase) and remote.knowledge.directory == knowledge

    local = build_backends(ExecutorSettings(estate_database_url=estate))
    assert isinstance(local.metrics, SqlMetricsBackend) and isinstance(local.logs, SqlLogsBackend)
    assert str(local.changes._engine.url) == estate
    # The relative default resolves to the shipped knowledge directory from any working directory.
    assert local.knowledge.directory.is_dir() and any(local.knowledge.directory.rglob("*.md"))
    assert set(build_default_registry(local).names()) == {
        "query_metrics", "query_logs", "lookup_knowledge", "query_changes", "get_current_time"}
