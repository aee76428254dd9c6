"""How a service's Prometheus series are typed and read, without a server:
families and their PromQL, the combination over instances, the tool's order and what it says it
did not examine, and the end of a change. The same reading against a real Prometheus:
tests/integration/test_prometheus_reading.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from services.executor.tools.backends import Contributor, MetricSeries
from services.executor.tools.metrics_tool import MAX_SERIES, query_metrics
from services.executor.tools.prometheus_backend import promql_string, rate_range_seconds
from services.executor.tools.prometheus_signals import (
    SeriesReading,
    SignalQuery,
    combine,
    families,
    matching,
    signal_queries,
)
from shared.core.change_point import find_end, find_onset
from shared.core.contracts import ToolInvocation
from shared.core.evidence_facts import ref_facts
from shared.core.tool_catalogue import QueryMetricsArguments

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
SELECTOR = 'job="checkout"'


def _labelsets(*items: tuple[str, dict[str, str]]) -> list[dict[str, str]]:
    return [{"__name__": name, "job": "checkout", **labels} for name, labels in items]


def _queries(labelsets, metadata=None, reading: SeriesReading | None = None) -> dict[str, SignalQuery]:
    found = families(labelsets, metadata or {})
    return {q.name: q for q in signal_queries(found, reading or SeriesReading(), promql_string)}


def _promql(query: SignalQuery) -> str:
    return query.promql(SELECTOR, "2m")


# --- typing -----------------------------------------------------------------------------------


def test_types_follow_the_naming_conventions_when_there_is_no_metadata() -> None:
    found = {f.name: f for f in families(_labelsets(
        ("rpc_calls_total", {"grpc_code": "OK", "host": "h1"}),
        ("rpc_latency_seconds_bucket", {"le": "0.5"}), ("rpc_latency_seconds_bucket", {"le": "+Inf"}),
        ("rpc_latency_seconds_sum", {}), ("rpc_latency_seconds_count", {}), ("rpc_latency_seconds_created", {}),
        ("gc_pause_seconds", {"quantile": "0.99"}), ("gc_pause_seconds", {"quantile": "0.5"}),
        ("gc_pause_seconds_sum", {}), ("gc_pause_seconds_count", {}),
        ("db_query_seconds_sum", {}), ("db_query_seconds_count", {}),
        ("retries_count", {}),
        ("queue_depth", {}),
    ), {})}
    assert {name: f.kind for name, f in found.items()} == {
        "rpc_calls_total": "counter", "rpc_latency_seconds": "histogram", "gc_pause_seconds": "summary",
        "db_query_seconds": "summary", "retries_count": "counter", "queue_depth": "gauge",
    }
    assert found["gc_pause_seconds"].quantiles == ("0.5", "0.99")
    assert found["rpc_latency_seconds"].unit == "seconds" and "le" not in found["rpc_latency_seconds"].labels
    assert all(f.typed_by == "name" for f in found.values())


def test_metadata_decides_the_type_and_unit_where_it_exists() -> None:
    # OpenMetrics names a counter family without `_total`; a gauge may look like a counter.
    metadata = {
        "jobs_done": [{"type": "counter", "help": "", "unit": ""}],
        "temperature_total": [{"type": "gauge", "help": "", "unit": "celsius"}],
        "job_wait": [{"type": "gauge", "help": "", "unit": "seconds"}],
    }
    found = {f.name: f for f in families(_labelsets(
        ("jobs_done_total", {}), ("temperature_total", {}), ("job_wait", {}),
    ), metadata)}
    assert (found["jobs_done_total"].kind, found["jobs_done_total"].typed_by) == ("counter", "metadata")
    assert (found["temperature_total"].kind, found["temperature_total"].unit) == ("gauge", "celsius")
    assert found["job_wait"].unit == "seconds"


@pytest.mark.parametrize("name", [
    "http_requests_created", "scrape_duration_seconds", "scrape_samples_scraped", "build_info", "python_info",
    "process_start_time_seconds", "target_info",
])
def test_bookkeeping_series_are_skipped(name: str) -> None:
    assert families(_labelsets((name, {}), ("work_queue_length", {})), {})[0].name == "work_queue_length"
    assert len(families(_labelsets((name, {})), {})) == 0


# --- readings ---------------------------------------------------------------------------------


def test_a_counter_with_a_status_label_gives_a_rate_and_an_error_ratio() -> None:
    queries = _queries(_labelsets(
        ("orders_total", {"code": "200", "pod": "a"}), ("orders_total", {"code": "503", "pod": "b"}),
    ), reading=SeriesReading(status_labels=("status", "code"), error_status_pattern="5.."))
    rate, ratio = queries["orders_total:rate"], queries["orders_total:error_ratio"]
    assert (rate.signal, rate.unit, rate.combine) == ("request_rate", "per_second", "sum")
    assert _promql(rate) == 'sum by (pod) (rate(orders_total{job="checkout"}[2m]))'
    assert (ratio.signal, ratio.unit) == ("error_ratio", "percent")
    assert _promql(ratio) == (
        '100 * (sum(rate(orders_total{job="checkout", code=~"5.."}[2m])) or vector(0)) '
        '/ sum(rate(orders_total{job="checkout"}[2m]))'
    )


def test_histograms_give_quantiles_and_a_mean_in_their_own_unit() -> None:
    queries = _queries(_labelsets(
        ("render_time_milliseconds_bucket", {"le": "50"}), ("render_time_milliseconds_sum", {}),
        ("render_time_milliseconds_count", {}),
    ))
    assert [q for q in queries] == [
        "render_time_milliseconds:p99", "render_time_milliseconds:p95", "render_time_milliseconds:p50",
        "render_time_milliseconds:mean",
    ]
    p99 = queries["render_time_milliseconds:p99"]
    assert (p99.signal, p99.unit) == ("latency_p99", "ms")
    assert _promql(p99) == 'histogram_quantile(0.99, sum by (le) (rate(render_time_milliseconds_bucket{job="checkout"}[2m])))'
    assert _promql(queries["render_time_milliseconds:mean"]) == (
        'sum(rate(render_time_milliseconds_sum{job="checkout"}[2m])) / sum(rate(render_time_milliseconds_count{job="checkout"}[2m]))'
    )


def test_cpu_seconds_are_read_as_cores_per_instance_and_gauges_as_they_are() -> None:
    queries = _queries(_labelsets(
        ("process_cpu_seconds_total", {"instance": "10.0.0.1:9100"}),
        ("container_memory_working_set_bytes", {"instance": "10.0.0.1:9100"}),
        ("db_pool_connections_in_use", {"instance": "10.0.0.1:9100"}),
        ("up", {"instance": "10.0.0.1:9100"}),
    ))
    cpu = queries["process_cpu_seconds_total:rate"]
    assert (cpu.signal, cpu.unit, cpu.combine, cpu.instance_labels) == ("cpu", "cores", "max", ("instance",))
    memory = queries["container_memory_working_set_bytes"]
    assert (memory.signal, memory.unit, memory.combine) == ("memory", "bytes", "max")
    assert _promql(memory) == 'max by (instance) (container_memory_working_set_bytes{job="checkout"})'
    assert queries["db_pool_connections_in_use"].signal == "saturation"
    down = queries["up:targets_down"]
    assert (down.signal, down.combine) == ("targets_down", "sum")
    assert _promql(down) == 'max by (instance) (1 - up{job="checkout"})'


def test_golden_signals_come_first_and_a_configured_template_replaces_its_namesake() -> None:
    labelsets = _labelsets(
        ("aaa_widgets_total", {}), ("requests_total", {"status": "500"}), ("zzz_gauge", {}),
        ("latency_seconds_bucket", {"le": "1"}), ("latency_seconds_sum", {}), ("latency_seconds_count", {}),
    )
    template = '100 * sum(rate(my_failures_total{{selector}}[{range}])) / sum(rate(my_calls_total{{selector}}[{range}]))'
    queries = list(_queries(labelsets, reading=SeriesReading(signals={"error_ratio": (template, "percent")})))
    assert queries[0] == "error_ratio"
    assert "requests_total:error_ratio" not in queries
    assert queries.index("latency_seconds:p99") < queries.index("requests_total:rate") < queries.index("aaa_widgets_total:rate")
    assert queries[-2:] == ["latency_seconds:mean", "zzz_gauge"] or queries[-1] == "zzz_gauge"
    configured = _queries(labelsets, reading=SeriesReading(signals={"error_ratio": (template, "percent")}))["error_ratio"]
    assert _promql(configured) == (
        '100 * sum(rate(my_failures_total{job="checkout"}[2m])) / sum(rate(my_calls_total{job="checkout"}[2m]))'
    )


def test_a_service_name_holding_a_placeholder_is_never_re_expanded() -> None:
    query = _queries(_labelsets(("jobs_total", {})))["jobs_total:rate"]
    hostile = f"service={promql_string('x{range}y')}"
    assert query.promql(hostile, "2m") == 'sum(rate(jobs_total{service="x{range}y"}[2m]))'


def test_a_metric_argument_selects_a_reading_a_family_or_a_signal() -> None:
    queries = list(_queries(_labelsets(
        ("requests_total", {"status": "200"}), ("latency_seconds_bucket", {"le": "1"}),
        ("latency_seconds_sum", {}), ("latency_seconds_count", {}),
    )).values())
    assert [q.name for q in matching(queries, "latency_seconds:p99")] == ["latency_seconds:p99"]
    assert len(matching(queries, "latency_seconds_bucket")) == 4
    assert [q.name for q in matching(queries, "error_ratio")] == ["requests_total:error_ratio"]
    assert [q.name for q in matching(queries, "requests_total")] == ["requests_total:error_ratio", "requests_total:rate"]
    assert matching(queries, "nothing_like_it") == []


def test_the_rate_window_covers_two_steps_four_scrapes_and_a_minute() -> None:
    assert rate_range_seconds(30, None) == 60
    assert rate_range_seconds(120, None) == 240
    assert rate_range_seconds(30, 30) == 120


# --- combining over instances -----------------------------------------------------------------


def _at(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


def test_per_instance_series_are_summed_or_maxed_and_the_hot_instance_is_named() -> None:
    parts = [({"pod": "pay-1"}, [(_at(0), 42.0), (_at(1), 40.0)]), ({"pod": "pay-2"}, [(_at(0), 43.0), (_at(1), 10.0)])]
    gauge = SignalQuery("in_flight", "saturation", "in_flight", "", "", "max", ("pod",))
    points, top = combine(gauge, parts)
    assert points == [(_at(0), 43.0), (_at(1), 40.0)]
    assert top == Contributor("pod", "pay-2", _at(0), 43.0, 2)
    rate = SignalQuery("x:rate", "request_rate", "x", "", "per_second", "sum", ("pod",))
    points, top = combine(rate, parts)
    assert points == [(_at(0), 85.0), (_at(1), 50.0)] and top == Contributor("pod", "pay-2", _at(0), 43.0, 2)


# --- the tool ---------------------------------------------------------------------------------


class _Backend:
    source_name = "prometheus:http://127.0.0.1:9090"

    def __init__(self, series: list[MetricSeries]) -> None:
        self.series = series

    def query_range(self, service, metric, start, end, step_seconds):
        return self.series


def _flat(value: float, n: int = 30) -> list[tuple[datetime, float]]:
    return [(_at(k), value + (k % 3) * 0.01) for k in range(n)]


def _episode(base: float, high: float, start: int, stop: int | None, n: int = 30) -> list[tuple[datetime, float]]:
    return [(_at(k), high if start <= k and (stop is None or k < stop) else base + (k % 2) * 0.001) for k in range(n)]


def _invoke(series: list[MetricSeries]) -> tuple[dict, dict[str, str], ToolInvocation]:
    args = QueryMetricsArguments(service="checkout", start=_at(0), end=_at(29))
    result = query_metrics(_Backend(series), args)
    invocation = ToolInvocation(
        run_id="r1", invocation_id=1, tool_name="query_metrics", request=result.request_scope, lifecycle="READY",
        evidence_status=result.evidence_status, agent_result=result.agent_result,
        evidence_refs=result.evidence_refs(),
    )
    return json.loads(result.agent_result), {r.raw_path: r.text for r in result.evidence_refs()}, invocation


def test_golden_signals_first_then_the_most_anomalous_and_the_rest_named_as_not_examined() -> None:
    others = [MetricSeries(f"other_{k:02d}", "", _flat(5.0)) for k in range(MAX_SERIES)]
    rising = MetricSeries("zz_rising", "", _episode(5.0, 80.0, 15, None))
    unread = MetricSeries("never_read", "", [], examined=False)
    golden = MetricSeries("requests_total:error_ratio", "percent", _flat(0.2), signal="error_ratio")
    data, refs, _ = _invoke([*others, rising, golden, unread])
    names = [s["metric"] for s in data["series"]]
    assert names[:2] == ["requests_total:error_ratio", "zz_rising"] and len(names) == MAX_SERIES
    assert data["not_examined"]["count"] == 3 and "never_read" in data["not_examined"]["names"]
    assert refs["summary"].endswith("; 3 more series not examined: other_10, other_11, never_read")
    assert data["series"][0]["signal"] == "error_ratio"


def test_a_change_that_ended_has_an_end_ref_and_one_that_lasts_has_none() -> None:
    ended = MetricSeries("requests_total:error_ratio", "percent", _episode(0.2, 22.0, 10, 18), signal="error_ratio")
    lasting = MetricSeries("latency_seconds:p99", "seconds", _episode(0.12, 2.5, 12, None), signal="latency_p99")
    data, refs, invocation = _invoke([ended, lasting])
    first, second = data["series"]
    assert first["onset"]["at"] == "2026-11-30T08:10:00Z" and first["end"]["at"] == "2026-11-30T08:18:00Z"
    assert refs["series[0].end"] == (
        "checkout requests_total:error_ratio back at 2026-11-30T08:18:00Z: 0.2% (median since) after 22.0% (median during)"
    )
    facts = ref_facts(invocation, "series[0].end")
    assert facts is not None and facts.kind == "metric_end" and facts.at == "2026-11-30T08:18:00Z"
    assert [(v.name, v.unit) for v in facts.values] == [("during", "%"), ("since", "%")]
    assert (facts.values[0].value, facts.values[1].value) == (22.0, pytest.approx(0.2, abs=0.001))
    assert "onset" in second and "end" not in second and "series[1].end" not in refs


def test_the_top_instance_is_a_citable_point_of_its_own() -> None:
    top = Contributor("pod", "checkout-7f9", _at(20), 0.93, 2)
    cpu = MetricSeries("process_cpu_seconds_total:rate", "cores", _episode(0.05, 0.93, 15, None), signal="cpu", top=top)
    data, refs, invocation = _invoke([cpu])
    assert refs["series[0].top"] == (
        "checkout process_cpu_seconds_total:rate top pod=checkout-7f9: 0.93 cores at 2026-11-30T08:20:00Z "
        "(highest of 2 instances at the peak)"
    )
    facts = ref_facts(invocation, "series[0].top")
    assert facts is not None and (facts.kind, facts.filter, facts.values[0].value) == ("metric_point", "pod=checkout-7f9", 0.93)


# --- the end of a change ----------------------------------------------------------------------


def test_find_end_needs_the_series_back_near_its_baseline_for_good() -> None:
    base = [1.0, 1.01, 0.99] * 4
    spike_then_back = base + [9.0] * 8 + base
    change = find_onset(spike_then_back)
    assert change is not None and find_end(spike_then_back, change) == 20
    half_way = base + [9.0] * 8 + [5.0] * 12  # down, but not back
    change = find_onset(half_way)
    assert change is not None and find_end(half_way, change) is None
    relapsed = base + [9.0] * 8 + base[:5] + [9.0] * 7
    change = find_onset(relapsed)
    assert change is not None and find_end(relapsed, change) is None


# --- what was not examined reaches the answer, in every layout -------------------------------


def test_the_series_left_unexamined_are_counted_in_the_scope_of_every_layout() -> None:
    from shared.call_scope import call_scope, unexamined_series
    from shared.core.contracts import (
        Claim,
        ClaimCheck,
        ComposerInput,
        EvidenceBinding,
        ExecutorEvidenceV2,
        VerifiedSource,
    )
    from shared.core.templates import compose_answer, release_source_lines

    stored = json.dumps({"tool": "query_metrics", "series": [], "not_examined": {"count": 3, "names": ["a", "b", "c"]}})
    assert unexamined_series(stored) == 3 and unexamined_series("{}") == unexamined_series("not json") == 0
    # The tool spelled with a JSON escape is still that tool; another tool's result counts nothing.
    assert unexamined_series(stored.replace("query_metrics", "\\u0071uery_metrics")) == 3
    assert unexamined_series(json.dumps({"tool": "query_logs", "not_examined": {"count": 3, "names": []}})) == 0
    scope = call_scope({"tool": "query_metrics", "service": "checkout"}, unexamined_series(stored))
    assert scope == "服务 checkout，全部指标，未检查序列 3"
    source = VerifiedSource(tool_name="query_metrics", invocation_id=4, scope=scope, source_kind="prometheus")
    claim = Claim(claim_id="c1", claim_type="observation", support_level="direct",
                  claim_text="checkout 的 process_cpu_seconds_total:rate 在 2026-11-30T08:20:00Z 达到 0.93 cores",
                  evidence_bindings=[EvidenceBinding(tool_name="query_metrics", source_invocation_id=4,
                                                     raw_path="series[0].points[20]", evidence_excerpt="0.93 cores")])
    for verdict in ("PASS", "LOW_CONFID"):
        out = compose_answer(ComposerInput(
            query="checkout 为什么 CPU 高？", effective_verdict=verdict,
            verified_executor_output=ExecutorEvidenceV2(claims=[claim]),
            claim_checks=[ClaimCheck(claim_id="c1", verification="direct_observation", detail="")],
            verified_sources=[source]))
        assert any(line.endswith("另有 3 条序列未检查") for line in out.sections["检查范围"]), out.sections
    assert release_source_lines([source])[-1].startswith("指标查询另有 3 条序列未检查")
