"""`shared.core.evidence_facts`: what each evidence ref states, read from the stored tool result.

The tool functions run in-process over a temporary SQLite estate (and, for Prometheus-style
units, over a backend that names its series the way Prometheus does), their results are stored
as the executor stores them, and every fact is checked against what the tool returned. Then the
facts reach the verifier's material: `VerifiedEvidence.facts` and `SnapshotEvidence.facts`, also
through the proto conversion.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import pytest

from attest.common.v1 import gatekeeper_types_pb2, single_react_pb2
from services.executor.estate import DEFAULT_ESTATE_DIR, load_estate, read_estate_description
from services.executor.tools.backends import MetricSeries
from services.executor.tools.metrics_tool import query_metrics
from services.executor.tools.prometheus_backend import unit_from_metric_name
from services.executor.tools.registry import ToolRegistry, build_default_registry
from services.executor.tools.sql_backends import build_sql_backends
from services.executor.tools.tool_result import ToolResult
from services.gatekeeper.engine import check_executor_output
from services.gatekeeper.evidence_guard import guard_draft
from shared.core import evidence_facts
from shared.core.contracts import RefFacts, RetrievalDetails, StatedValue, ToolInvocation
from shared.core.evidence_facts import facts_reader, normalise_unit, ref_facts
from shared.core.evidence_view import evidence_view
from shared.core.tool_catalogue import QueryMetricsArguments
from shared.core.value_format import format_value
from shared.log_templates import mask
from shared.proto_convert import message_to_plain, plain_to_message

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
START, END = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"
RUN = "run-facts"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> ToolRegistry:
    url = f"sqlite:///{tmp_path_factory.mktemp('facts') / 'estate.db'}"
    load_estate(url, DEFAULT_ESTATE_DIR, anchor=ANCHOR)
    return build_default_registry(build_sql_backends(url))


@pytest.fixture(scope="module")
def incident():
    return read_estate_description(DEFAULT_ESTATE_DIR).incidents[0]


def stored(result: ToolResult, arguments: dict, invocation_id: int = 1, tool_call_id: str = "call-1") -> ToolInvocation:
    """The invocation row as the executor persists it: request = the bounded arguments."""
    return ToolInvocation(
        invocation_id=invocation_id, run_id=RUN, tool_call_id=tool_call_id, tool_name=result.tool_name,
        lifecycle="READY", evidence_status=result.evidence_status, request={"tool": result.tool_name, **arguments},
        agent_result=result.agent_result, retrieval_details=RetrievalDetails(evidence_refs=result.evidence_refs()),
    )


def call(registry: ToolRegistry, tool: str, arguments: dict, invocation_id: int = 1) -> ToolInvocation:
    return stored(registry.invoke(tool, arguments), arguments, invocation_id, f"call-{invocation_id}")


# --- query_metrics --------------------------------------------------------------------------------


def test_metric_points_state_service_metric_time_and_value(registry, incident):
    invocation = call(registry, "query_metrics", {"service": incident.service, "start": START, "end": END})
    projection = json.loads(invocation.agent_result)
    read = facts_reader(invocation)
    checked = 0
    for i, series in enumerate(projection["series"]):
        for j, (stamp, value) in enumerate(series["points"]):
            facts = read(f"series[{i}].points[{j}]")
            unit = {"percent": "%", "ms": "ms", "per_second": "/s", "count": "count"}[series["unit"]]
            assert facts == RefFacts(
                kind="metric_point", subject=incident.service, metric=series["metric"], at=stamp,
                values=[StatedValue(name="value", value=value, unit=unit, at=stamp)],
                # the last point of a move not ended by the window's end
                ongoing=j == len(series["points"]) - 1 and series.get("onset") is not None and series.get("end") is None,
            )
            checked += 1
    assert checked == sum(len(s["points"]) for s in projection["series"]) > 100
    # The same instant and value the rendered text shows, which was never read.
    ref = next(r for r in evidence_view(invocation).refs() if r.raw_path == "series[0].points[5]")
    facts = read("series[0].points[5]")
    assert ref.timestamp == facts.at
    assert ref.text == f"{incident.service} {facts.metric}={format_value(facts.values[0].value, projection['series'][0]['unit'])} at {facts.at}"


def test_metric_series_summary_states_min_median_max_with_the_peak_time(registry, incident):
    metric = incident.metrics[0].metric
    invocation = call(registry, "query_metrics", {"service": incident.service, "metric": metric, "start": START, "end": END})
    series = json.loads(invocation.agent_result)["series"][0]
    values = [value for _, value in series["points"]]
    peak = max(range(len(values)), key=lambda k: values[k])
    facts = ref_facts(invocation, "series[0].summary")
    assert facts.kind == "metric_summary"
    assert (facts.subject, facts.metric, facts.window_start, facts.window_end) == (incident.service, metric, START, END)
    assert [(v.name, v.unit) for v in facts.values] == [("min", "%"), ("median", "%"), ("max", "%")]
    assert facts.values[0].value == min(values) and facts.values[2].value == max(values)
    assert facts.values[2].at == series["points"][peak][0] and facts.values[0].at == facts.values[1].at == ""
    assert facts.item_count == len(values) == 61 and not facts.empty


def test_metric_scope_states_filter_window_and_point_count(registry, incident):
    every = call(registry, "query_metrics", {"service": incident.service, "start": START, "end": END})
    points = sum(len(s["points"]) for s in json.loads(every.agent_result)["series"])
    assert ref_facts(every, "summary") == RefFacts(
        kind="metric_scope", subject=incident.service, window_start=START, window_end=END, item_count=points,
    )
    metric = incident.metrics[0].metric
    one = call(registry, "query_metrics", {"service": incident.service, "metric": metric, "start": START, "end": END})
    facts = ref_facts(one, "summary")
    assert (facts.filter, facts.metric, facts.item_count, facts.empty) == (metric, metric, 61, False)


def test_a_metric_without_points_is_an_empty_scope(registry, incident):
    invocation = call(registry, "query_metrics", {"service": incident.service, "metric": "no_such_metric", "start": START, "end": END})
    assert invocation.evidence_status == "NO_EVIDENCE"
    assert ref_facts(invocation, "summary") == RefFacts(
        kind="metric_scope", subject=incident.service, metric="no_such_metric", filter="no_such_metric",
        window_start=START, window_end=END, item_count=0, empty=True,
    )
    assert ref_facts(invocation, "series[0].points[0]") is None


class PrometheusNamedSeries:
    """A MetricsBackend whose series are named and unit-typed the way the Prometheus backend's are
    (unit from the metric name's suffix), so no demo-estate name is assumed."""

    source_name = "prometheus:http://prometheus:9090"

    def query_range(self, service, metric, start, end, step_seconds):
        at = [datetime(2026, 11, 29, 10, m, tzinfo=UTC) for m in (0, 1, 2)]
        named = {
            "process_resident_memory_bytes": [1073741824.0, 1610612736.0, 1288490188.8],
            "http_server_errors_ratio": [0.01, 0.07, 0.02],
            "request_duration_seconds": [0.25, 1.5, 0.5],
            "jvm_gc_pause_milliseconds": [12.0, 40.0, 18.0],
            "grpc_requests_per_second": [120.0, 180.5, 150.0],
            "kafka_consumer_lag": [10.0, 5000.0, 20.0],
            "node_temperature_celsius": [41.0, 44.0, 42.0],
        }
        return [MetricSeries(name, unit_from_metric_name(name), list(zip(at, values))) for name, values in named.items()]


def test_prometheus_units_are_normalised_and_values_rescaled_only_where_the_unit_is():
    args = QueryMetricsArguments(service="cart", start=START, end=END)
    invocation = stored(query_metrics(PrometheusNamedSeries(), args), {"service": "cart", "start": START, "end": END})
    read = facts_reader(invocation)
    by_metric = {}
    for i, series in enumerate(json.loads(invocation.agent_result)["series"]):
        point, summary = read(f"series[{i}].points[1]"), read(f"series[{i}].summary")
        by_metric[series["metric"]] = (point.values[0].value, point.values[0].unit, summary.values[2].value)
    assert by_metric == {
        "process_resident_memory_bytes": (1536.0, "MB", 1536.0),  # 1.5 GiB, as the ref text shows it
        "http_server_errors_ratio": (7.0, "%", 7.0),
        "request_duration_seconds": (1.5, "s", 1.5),
        "jvm_gc_pause_milliseconds": (40.0, "ms", 40.0),
        "grpc_requests_per_second": (180.5, "/s", 180.5),
        "kafka_consumer_lag": (5000.0, "", 5000.0),
        "node_temperature_celsius": (44.0, "", 44.0),  # no unit suffix Prometheus names: none
    }
    assert all(read(f"series[{i}].points[0]").subject == "cart" for i in range(7))


@pytest.mark.parametrize("unit, expected", [
    ("percent", ("%", 1.0)), ("%", ("%", 1.0)), ("ratio", ("%", 100.0)), ("ms", ("ms", 1.0)),
    ("milliseconds", ("ms", 1.0)), ("seconds", ("s", 1.0)), ("s", ("s", 1.0)), ("bytes", ("MB", 1 / 1048576)),
    ("per_second", ("/s", 1.0)), ("rps", ("/s", 1.0)), ("count", ("count", 1.0)), ("1", ("count", 1.0)),
    ("", ("", 1.0)), ("none", ("", 1.0)), ("Percent", ("%", 1.0)), ("celsius", ("celsius", 1.0)),
    ("x" * 80, ("x" * 32, 1.0)), (None, None), (3, None),
])
def test_unit_table(unit, expected):
    assert normalise_unit(unit) == expected


# --- query_logs -----------------------------------------------------------------------------------


def test_log_lines_state_service_time_and_level(registry, incident):
    arguments = {"service": incident.service, "start": START, "end": END, "level": "error,warn"}
    invocation = call(registry, "query_logs", arguments)
    projection = json.loads(invocation.agent_result)
    read = facts_reader(invocation)
    assert {hit["level"] for hit in projection["hits"]} == {"ERROR", "WARN"}
    firsts = 0
    for k, hit in enumerate(projection["hits"]):
        facts = read(f"hits[{k}]")
        assert facts == RefFacts(kind="log_line", subject=incident.service, at=hit["ts"], level=hit["level"],
                                 window_start=START, window_end=END, first_of_kind=facts.first_of_kind, signature=mask(hit["message"]))
        firsts += facts.first_of_kind
    # The first line of each kind is marked, never a repeat of one (the read's lines repeat kinds).
    assert 0 < firsts < len(projection["hits"])
    assert read("summary") == RefFacts(
        kind="log_scope", subject=incident.service, window_start=START, window_end=END, level="ERROR,WARN",
        item_count=projection["total_matches"], empty=False,
    )


def test_log_scope_counts_every_match_and_names_its_text_filter(registry, incident):
    arguments = {"service": incident.service, "start": START, "end": END, "contains": "decode failed", "limit": 5}
    invocation = call(registry, "query_logs", arguments)
    projection = json.loads(invocation.agent_result)
    assert projection["returned"] == 5 < projection["total_matches"]
    facts = ref_facts(invocation, "summary")
    assert (facts.kind, facts.filter, facts.level, facts.item_count, facts.empty) == (
        "log_scope", "decode failed", "", projection["total_matches"], False)
    assert ref_facts(invocation, "hits[5]") is None  # only five lines were returned


def test_a_search_without_hits_is_an_empty_log_scope(registry, incident):
    arguments = {"service": incident.service, "start": START, "end": END, "level": "FATAL", "contains": "no such text"}
    invocation = call(registry, "query_logs", arguments)
    assert invocation.evidence_status == "NO_EVIDENCE"
    assert ref_facts(invocation, "summary") == RefFacts(
        kind="log_scope", subject=incident.service, window_start=START, window_end=END, level="FATAL",
        filter="no such text", item_count=0, empty=True,
    )


# --- query_changes and lookup_knowledge -----------------------------------------------------------


def test_changes_state_the_changed_service_time_and_author(registry):
    arguments = {"start": "2026-11-28T11:00:00Z", "end": END}
    invocation = call(registry, "query_changes", arguments)
    projection = json.loads(invocation.agent_result)
    read = facts_reader(invocation)
    assert len({change["service"] for change in projection["changes"]}) > 1  # every service was asked for
    for k, change in enumerate(projection["changes"]):
        assert read(f"changes[{k}]") == RefFacts(
            kind="change", subject=change["service"], at=change["ts"], change_kind=change["kind"],
            actor=change["author"],
        )
    assert read("summary") == RefFacts(
        kind="change_scope", window_start="2026-11-28T11:00:00Z", window_end=END,
        item_count=projection["total_matches"], empty=False,
    )


def test_change_scope_of_one_service_and_kind(registry, incident):
    arguments = {"service": incident.service, "kind": "no-such-kind", "start": START, "end": END}
    invocation = call(registry, "query_changes", arguments)
    assert ref_facts(invocation, "summary") == RefFacts(
        kind="change_scope", subject=incident.service, filter="no-such-kind", window_start=START, window_end=END,
        item_count=0, empty=True,
    )


def test_an_onset_ref_states_its_series_onset_and_levels(registry, incident):
    metric = incident.metrics[0].metric
    invocation = call(registry, "query_metrics", {"service": incident.service, "metric": metric, "start": START, "end": END})
    series = json.loads(invocation.agent_result)["series"][0]
    onset = series["onset"]  # every demo incident's first metric changes inside the hour
    facts = ref_facts(invocation, "series[0].onset")
    assert facts is not None and facts.kind == "metric_onset"
    assert (facts.subject, facts.metric, facts.at, facts.level) == (incident.service, metric, onset["at"], onset["direction"])
    assert onset["at"] == series["points"][onset["index"]][0]
    assert [v.name for v in facts.values] == ["before", "after"] and facts.values[1].at == onset["at"]
    assert (facts.window_start, facts.window_end) == (START, END)
    broken = json.loads(invocation.agent_result)
    broken["series"][0]["onset"]["direction"] = "sideways"
    assert ref_facts(invocation.model_copy(update={"agent_result": json.dumps(broken)}), "series[0].onset") is None


def test_knowledge_refs_are_about_no_service(registry):
    invocation = call(registry, "lookup_knowledge", {"query": "CPU 使用率高 排查"})
    projection = json.loads(invocation.agent_result)
    chunks = sum(len(doc["chunks"]) for doc in projection["docs"])
    assert chunks > 0
    assert ref_facts(invocation, "docs[0].chunks[0]") == RefFacts(kind="knowledge")
    assert ref_facts(invocation, "summary") == RefFacts(kind="knowledge", filter="CPU 使用率高 排查", item_count=chunks)


def test_every_ref_of_every_tool_has_facts(registry, incident):
    calls = [
        ("query_metrics", {"service": incident.service, "start": START, "end": END}),
        ("query_logs", {"service": incident.service, "start": START, "end": END}),
        ("query_changes", {"start": START, "end": END}),
        ("lookup_knowledge", {"query": "5xx 发布 回滚"}),
    ]
    for number, (tool, arguments) in enumerate(calls, start=1):
        invocation = call(registry, tool, arguments, number)
        read = facts_reader(invocation)
        for ref in evidence_view(invocation).refs():
            facts = read(ref.raw_path)
            assert facts is not None, (tool, ref.raw_path)
            if facts.at:
                assert facts.at == ref.timestamp


# --- malformed records ----------------------------------------------------------------------------


def _metrics_record(**overrides) -> ToolInvocation:
    projection = {
        "tool": "query_metrics", "service": "cart", "metric": None, "start": START, "end": END,
        "series": [{"metric": "cpu_usage_percent", "unit": "percent", "points": [["2026-11-29T10:00:00Z", 41.5]],
                    "summary": {"count": 1, "min": 41.5, "median": 41.5, "max": 41.5, "max_at": "2026-11-29T10:00:00Z"}}],
        "summary": "query_metrics service=cart metric=* …",
    }
    projection.update(overrides)
    return ToolInvocation(invocation_id=1, run_id=RUN, tool_name="query_metrics", lifecycle="READY",
                          agent_result=json.dumps(projection), request={"service": "cart", "start": START, "end": END})


def _with_point(value) -> ToolInvocation:
    record = _metrics_record()
    projection = json.loads(record.agent_result)
    projection["series"][0]["points"][0] = value
    return record.model_copy(update={"agent_result": json.dumps(projection)})


def test_a_well_formed_record_reads():
    assert ref_facts(_metrics_record(), "series[0].points[0]").values[0].value == 41.5
    # Where the projection lacks a field, the request scope says it.
    assert ref_facts(_metrics_record(service=None), "series[0].points[0]").subject == "cart"
    assert ref_facts(_metrics_record(start=None), "series[0].summary").window_start == START


@pytest.mark.parametrize("record, raw_path", [
    (_metrics_record().model_copy(update={"agent_result": "not json"}), "summary"),
    (_metrics_record().model_copy(update={"agent_result": None}), "summary"),
    (_metrics_record().model_copy(update={"agent_result": "[1, 2]"}), "summary"),
    (_metrics_record(tool="query_logs"), "summary"),  # the projection names another tool
    (_metrics_record().model_copy(update={"tool_name": "get_current_time"}), "summary"),  # not an evidence tool
    (_metrics_record(), "series[1].points[0]"),  # out of range
    (_metrics_record(), "series[0].points[0].value"),
    (_metrics_record(), "series[0]"),
    (_metrics_record(), "hits[0]"),  # another tool's path
    (_metrics_record(), ""),
    (_metrics_record(), "series[0].points[" + "9" * 400 + "]"),
    (_metrics_record(), None),
    (_metrics_record(series="x"), "summary"),
    (_metrics_record(series=[{"metric": "m", "unit": "percent", "points": "x"}]), "summary"),
    (_metrics_record(start="yesterday"), "summary"),
    (_metrics_record(start=None).model_copy(update={"request": {"service": "cart"}}), "series[0].summary"),  # no window anywhere
    (_metrics_record(service=""), "series[0].points[0]"),
    (_metrics_record(service=7), "series[0].points[0]"),
    (_metrics_record(series=[{"metric": "", "unit": "percent", "points": [["2026-11-29T10:00:00Z", 1]]}]), "series[0].points[0]"),
    (_metrics_record(series=[{"metric": "m", "unit": 5, "points": [["2026-11-29T10:00:00Z", 1]]}]), "series[0].points[0]"),
    (_metrics_record(series=[{"metric": "m", "unit": "percent", "points": [], "summary": {"count": 0}}]), "series[0].summary"),
    (_with_point(["2026-11-29T10:00:00Z", "41.5"]), "series[0].points[0]"),
    (_with_point(["2026-11-29T10:00:00Z", True]), "series[0].points[0]"),
    (_with_point(["2026-11-29T10:00:00Z", None]), "series[0].points[0]"),
    (_with_point(["2026-11-29 10:00", 41.5]), "series[0].points[0]"),
    (_with_point(["2026-11-29T10:00:00+08:00", 41.5]), "series[0].points[0]"),  # not UTC
    (_with_point(["2026-11-29T10:00:00Z"]), "series[0].points[0]"),
    (_with_point({"ts": "2026-11-29T10:00:00Z", "value": 1}), "series[0].points[0]"),
])
def test_malformed_or_unknown_gives_none(record, raw_path):
    assert ref_facts(record, raw_path) is None


def test_non_finite_values_give_none():
    record = _metrics_record()
    text = record.agent_result.replace("41.5]]", "NaN]]")
    assert "NaN" in text
    assert ref_facts(record.model_copy(update={"agent_result": text}), "series[0].points[0]") is None


@pytest.mark.parametrize("tool, projection, raw_path", [
    ("query_logs", {"tool": "query_logs", "service": "s", "start": START, "end": END, "hits": [{"ts": START}]}, "hits[0]"),
    ("query_logs", {"tool": "query_logs", "service": "s", "start": START, "end": END, "hits": [], "total_matches": -1}, "summary"),
    ("query_logs", {"tool": "query_logs", "service": "s", "start": START, "end": END, "hits": [], "total_matches": "3"}, "summary"),
    ("query_logs", {"tool": "query_logs", "service": "s", "start": START, "end": END, "level": [1], "total_matches": 0}, "summary"),
    ("query_changes", {"tool": "query_changes", "changes": [{"ts": START, "service": None}]}, "changes[0]"),
    ("query_changes", {"tool": "query_changes", "start": START, "end": END, "total_matches": True}, "summary"),
    ("lookup_knowledge", {"tool": "lookup_knowledge", "docs": [{"chunks": ["text"]}]}, "docs[0].chunks[0]"),
    ("lookup_knowledge", {"tool": "lookup_knowledge", "docs": [{"path": "x"}]}, "summary"),
])
def test_malformed_records_of_the_other_tools_give_none(tool, projection, raw_path):
    record = ToolInvocation(invocation_id=1, run_id=RUN, tool_name=tool, agent_result=json.dumps(projection))
    assert ref_facts(record, raw_path) is None


def test_the_projection_is_parsed_once_per_reader(monkeypatch, registry, incident):
    invocation = call(registry, "query_metrics", {"service": incident.service, "start": START, "end": END})
    loads = []
    real = evidence_facts.read_result
    monkeypatch.setattr(evidence_facts, "read_result", lambda *args: loads.append(1) or real(*args))
    read = facts_reader(invocation)
    assert all(read(ref.raw_path) is not None for ref in evidence_view(invocation).refs())
    assert len(loads) == 1


# --- the facts reach the verifier's material ------------------------------------------------------


def test_verified_evidence_carries_the_facts_of_its_ref_through_proto(registry, incident):
    metric = incident.metrics[0].metric
    metrics = call(registry, "query_metrics", {"service": incident.service, "metric": metric, "start": START, "end": END}, 12)
    logs = call(registry, "query_logs", {"service": incident.service, "start": START, "end": END, "level": "ERROR"}, 13)
    point = next(r for r in evidence_view(metrics).refs() if r.raw_path == "series[0].points[30]")
    hit = next(r for r in evidence_view(logs).refs() if r.raw_path == "hits[0]")

    def bind(invocation, ref):
        return {"source_type": "tool", "tool_name": invocation.tool_name, "source_invocation_id": invocation.invocation_id,
                "raw_path": ref.raw_path, "evidence_excerpt": ref.text[:40]}

    output = {
        "answer_version": "executor_evidence_v2",
        "claims": [{"claim_id": "c1", "claim_type": "symptom", "claim_text": f"{incident.service} {metric}",
                    "support_level": "direct",
                    "evidence_bindings": [bind(metrics, point), bind(metrics, next(
                        r for r in evidence_view(metrics).refs() if r.raw_path == "series[0].summary")),
                                          bind(logs, hit)]}],
        "hypotheses": [], "recommended_actions": [], "missing_info": [],
    }
    check = check_executor_output(RUN, output, [metrics, logs])
    assert check.verdict_ceiling == "PASS", check.gatekeeper_result.errors
    kinds = [(e.raw_path, e.facts.kind) for e in check.verified_evidence]
    assert kinds == [("series[0].points[30]", "metric_point"), ("series[0].summary", "metric_summary"), ("hits[0]", "log_line")]
    first = check.verified_evidence[0].facts
    assert (first.subject, first.metric, first.at) == (incident.service, metric, point.timestamp)

    for item in check.verified_evidence:
        message = plain_to_message(item, gatekeeper_types_pb2.VerifiedEvidence)
        assert message.facts.kind == item.facts.kind
        back = type(item).model_validate(message_to_plain(message))
        assert back == item


def test_snapshot_facts_follow_the_excerpt_order(registry, incident):
    metric = incident.metrics[0].metric
    metrics = call(registry, "query_metrics", {"service": incident.service, "metric": metric, "start": START, "end": END}, 21)
    nohit = call(registry, "query_logs", {"service": incident.service, "start": START, "end": END, "contains": "no such text"}, 22)
    peak = json.loads(metrics.agent_result)["series"][0]["summary"]
    draft = {
        "conclusion": {"text": "结论", "analysis_refs": ["a1", "a2"]},
        "analyses": [
            {"analysis_id": "a1", "kind": "NORMAL", "text": f"{metric} 最高 {peak['max']} at {peak['max_at']}",
             "tool_call_ids": ["call-21"]},
            {"analysis_id": "a2", "kind": "NEGATIVE_OBSERVATION", "text": "没有匹配的日志", "tool_call_ids": ["call-22"]},
        ],
    }
    result = guard_draft(RUN, draft, [metrics, nohit])
    assert result.passed, result.violations
    (first,), (second,) = (group.evidence for group in result.snapshot.analyses)
    lines = [line for line in first.excerpt.split("\n") if not line.startswith("(+")]
    refs_by_text = {ref.text: ref for ref in evidence_view(metrics).refs()}
    read = facts_reader(metrics)
    # Each line's facts, with the raw_path a typed statement names the ref by.
    paths = [refs_by_text[line].raw_path for line in lines]
    assert first.facts == [read(path).model_copy(update={"raw_path": path}) for path in paths]
    assert first.facts[0].kind == "metric_scope" and "metric_summary" in [f.kind for f in first.facts]
    assert second.facts == [RefFacts(kind="log_scope", subject=incident.service, window_start=START, window_end=END,
                                     filter="no such text", empty=True, raw_path="summary")]
    message = plain_to_message(first, single_react_pb2.SnapshotEvidence)
    assert [f.kind for f in message.facts] == [f.kind for f in first.facts]
    assert math.isclose(message.facts[0].item_count, 61)
