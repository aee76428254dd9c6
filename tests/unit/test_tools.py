"""Evidence tools over the SQL estate: results, evidence refs, raw_path texts and argument errors."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from services.executor.estate import DEFAULT_ESTATE_DIR, load_estate, metric_point, read_estate_description
from services.executor.tools.backends import ToolBackends
from services.executor.tools.registry import (
    ToolArgumentError,
    ToolBackendError,
    ToolError,
    ToolRegistry,
    ToolSpec,
    build_default_registry,
)
from services.executor.tools.sql_backends import SqlLogsBackend, SqlMetricsBackend, build_sql_backends
from shared.core.tool_catalogue import GetCurrentTimeArguments
from shared.core.value_format import format_value

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
START, END = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"
POINT_TEXT = re.compile(r"^(\S+) (\S+)=(\S+) at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$")
HIT_TEXT = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) (DEBUG|INFO|WARN|ERROR|FATAL) (\S+) host=(\S+) (.+)$", re.S)


@pytest.fixture(scope="module")
def estate_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('tools') / 'estate.db'}"
    load_estate(url, DEFAULT_ESTATE_DIR, anchor=ANCHOR)
    return url


@pytest.fixture(scope="module")
def registry(estate_url: str) -> ToolRegistry:
    return build_default_registry(build_sql_backends(estate_url))


@pytest.fixture(scope="module")
def incident():
    description = read_estate_description(DEFAULT_ESTATE_DIR)
    return description.incidents[0]


def _refs(result) -> dict[str, str]:
    return {ref.raw_path: ref.text for ref in result.evidence_refs()}


def test_registry_is_explicit_with_schemas_and_evidence_flags(registry: ToolRegistry) -> None:
    assert registry.names() == ["query_metrics", "query_logs", "lookup_knowledge", "query_changes", "get_current_time"]
    for spec in registry.specs():
        assert spec.description and spec.parameters["type"] == "object"
    metrics = registry.get("query_metrics")
    assert metrics.evidence_bearing and set(metrics.parameters["required"]) == {"service", "start", "end"}
    assert set(registry.get("query_changes").parameters["required"]) == {"start", "end"}
    assert registry.get("lookup_knowledge").parameters["required"] == ["query"]
    for name in ("query_logs", "lookup_knowledge", "query_changes"):
        assert registry.get(name).evidence_bearing
    assert not registry.get("get_current_time").evidence_bearing
    assert [s["function"]["name"] for s in registry.function_schemas()] == registry.names()
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("query_logs"))


def test_query_metrics_returns_every_series_with_one_ref_per_point(registry: ToolRegistry, incident, estate_url: str) -> None:
    result = registry.invoke("query_metrics", {"service": incident.service, "start": START, "end": END})
    assert result.evidence_status == "EVIDENCE_FOUND"
    data = json.loads(result.agent_result)
    refs = _refs(result)
    description = read_estate_description(DEFAULT_ESTATE_DIR)
    owner = next(s for s in description.services if s.name == incident.service)
    assert sorted(s["metric"] for s in data["series"]) == sorted(owner.metrics)
    for i, series in enumerate(data["series"]):
        assert len(series["points"]) == 61
        for j, (ts, value) in enumerate(series["points"]):
            match = POINT_TEXT.match(refs[f"series[{i}].points[{j}]"])
            assert match, refs[f"series[{i}].points[{j}]"]
            assert match.groups() == (incident.service, series["metric"], format_value(value, series["unit"]), ts)
        assert refs[f"series[{i}].summary"].startswith(f"{incident.service} {series['metric']} {START}..{END}: 61 points")
    assert refs["summary"] == f"query_metrics service={incident.service} metric=* {START}..{END}: {len(data['series'])} series, {61 * len(data['series'])} points"
    assert result.request_scope == {"tool": "query_metrics", "service": incident.service, "start": START, "end": END, "step_seconds": 60}

    # The point texts are the stored values.
    engine = create_engine(estate_url)
    with engine.connect() as connection:
        stored = connection.execute(
            select(metric_point.c.value).where(metric_point.c.service == incident.service, metric_point.c.metric == data["series"][0]["metric"],
                                               metric_point.c.ts >= ANCHOR - timedelta(hours=1)).order_by(metric_point.c.ts)
        ).scalars().all()
    engine.dispose()
    assert [p[1] for p in data["series"][0]["points"]] == stored


def test_query_metrics_one_metric_and_coarser_step_keep_real_peaks(registry: ToolRegistry, incident) -> None:
    metric = incident.metrics[0].metric
    fine = json.loads(registry.invoke("query_metrics", {"service": incident.service, "metric": metric, "start": START, "end": END}).agent_result)
    coarse_result = registry.invoke("query_metrics", {"service": incident.service, "metric": metric, "start": START, "end": END, "step_seconds": 300})
    coarse = json.loads(coarse_result.agent_result)
    assert [s["metric"] for s in coarse["series"]] == [metric]
    points = coarse["series"][0]["points"]
    assert len(points) <= 13
    fine_points = {ts: value for ts, value in fine["series"][0]["points"]}
    assert all(fine_points[ts] == value for ts, value in points)  # every point is a stored sample
    assert max(v for _, v in points) == max(fine_points.values())  # the peak survives
    assert coarse_result.request_scope["metric"] == metric


def test_query_metrics_bounds_points_on_a_wide_window(registry: ToolRegistry, incident) -> None:
    result = registry.invoke("query_metrics", {"service": incident.service, "start": "2026-11-22T11:00:00Z", "end": END})
    data = json.loads(result.agent_result)
    assert data["step_seconds"] >= 7 * 24 * 3600 // 240
    assert all(len(s["points"]) <= 240 for s in data["series"])
    assert all(len(ref.text) <= 500 for ref in result.evidence_refs())


def test_query_logs_hits_carry_the_line_and_the_summary_counts(registry: ToolRegistry, incident) -> None:
    result = registry.invoke("query_logs", {"service": incident.service, "start": START, "end": END, "level": ["ERROR", "WARN"]})
    assert result.evidence_status == "EVIDENCE_FOUND"
    data = json.loads(result.agent_result)
    refs = _refs(result)
    assert data["returned"] == len(data["hits"]) > 0
    timestamps = []
    for k, hit in enumerate(data["hits"]):
        match = HIT_TEXT.match(refs[f"hits[{k}]"])
        assert match, refs[f"hits[{k}]"]
        assert match.group(1) == hit["ts"] and match.group(2) in ("ERROR", "WARN") and match.group(3) == incident.service
        assert hit["message"] in refs[f"hits[{k}]"]
        timestamps.append(hit["ts"])
    assert timestamps == sorted(timestamps)
    assert refs["summary"] == (
        f"query_logs service={incident.service} level=ERROR,WARN {START}..{END}: {data['total_matches']} matching lines, "
        f"first at {timestamps[0]}, last at {timestamps[-1]}; {data['window_lines']} lines of any level"
    )
    assert (data["first_ts"], data["last_ts"]) == (timestamps[0], timestamps[-1])
    assert data["window_lines"] >= data["total_matches"] and data["unclassified_lines"] == 0
    assert result.request_scope["level"] == "ERROR,WARN"


def test_query_logs_contains_is_case_insensitive_and_limit_keeps_the_oldest_and_newest(registry: ToolRegistry, incident) -> None:
    all_errors = json.loads(registry.invoke("query_logs", {"service": incident.service, "start": START, "end": END, "level": "error"}).agent_result)
    assert all_errors["total_matches"] >= 3
    word = all_errors["hits"][0]["message"].split(" - ")[-1].split()[0]
    found = json.loads(registry.invoke("query_logs", {"service": incident.service, "start": START, "end": END, "contains": word.upper()}).agent_result)
    assert found["total_matches"] >= 1 and all(word.lower() in h["message"].lower() for h in found["hits"])

    limited = registry.invoke("query_logs", {"service": incident.service, "start": START, "end": END, "level": "ERROR", "limit": 2})
    data = json.loads(limited.agent_result)
    assert [h["ts"] for h in data["hits"]] == [all_errors["hits"][0]["ts"], all_errors["hits"][-1]["ts"]]
    assert (data["first_ts"], data["last_ts"]) == (all_errors["hits"][0]["ts"], all_errors["hits"][-1]["ts"])
    assert f"{all_errors['total_matches']} matching lines, first at {data['first_ts']}, last at {data['last_ts']}; " \
           "1 oldest and 1 newest returned; " in _refs(limited)["summary"]


@pytest.mark.parametrize("tool, arguments, expected", [
    ("query_logs", {"service": "no-such-service", "level": "ERROR"},
     "query_logs service=no-such-service level=ERROR 2026-11-29T10:00:00Z..2026-11-29T11:00:00Z: 0 matching lines; "
     "0 lines of any level"),
    ("query_metrics", {"service": "no-such-service"},
     "query_metrics service=no-such-service metric=* 2026-11-29T10:00:00Z..2026-11-29T11:00:00Z: 0 series, 0 points"),
])
def test_no_evidence_still_has_one_summary_ref(registry: ToolRegistry, tool: str, arguments: dict, expected: str) -> None:
    result = registry.invoke(tool, {**arguments, "start": START, "end": END})
    assert result.evidence_status == "NO_EVIDENCE"
    assert [(ref.raw_path, ref.text) for ref in result.evidence_refs()] == [("summary", expected)]


def test_log_ref_text_is_bounded(tmp_path: Path) -> None:
    estate = tmp_path / "estate"
    estate.mkdir()
    (estate / "services.json").write_text(json.dumps({
        "history_minutes": 60,
        "metrics": {"cpu_usage_percent": {"unit": "percent"}},
        "services": [{"name": "verbose-svc", "hosts": ["v-1"], "metrics": {"cpu_usage_percent": {"baseline": 10}},
                      "logs": [{"level": "ERROR", "rate_per_min": 2, "template": "stack " + "x" * 900}]}],
    }))
    url = f"sqlite:///{tmp_path / 'e.db'}"
    load_estate(url, estate, anchor=ANCHOR)
    result = build_default_registry(build_sql_backends(url)).invoke("query_logs", {"service": "verbose-svc", "start": START, "end": END})
    assert result.evidence_refs() and all(len(ref.text) <= 500 for ref in result.evidence_refs())


@pytest.mark.parametrize("tool, arguments, fragment", [
    ("query_metrics", {"service": "a-svc"}, "start: Field required"),
    ("query_metrics", {"service": "a-svc", "start": "yesterday", "end": END}, "start: Input should be a valid datetime"),
    ("query_metrics", {"service": "a-svc", "start": END, "end": START}, "end must be after start"),
    ("query_metrics", {"service": "a-svc", "start": "2026-10-01T00:00:00Z", "end": END}, "at most 7 days"),
    ("query_metrics", {"service": "a-svc", "start": START, "end": END, "step_seconds": 1}, "step_seconds"),
    ("query_metrics", {"service": "a b; drop table", "start": START, "end": END}, "service: String should match pattern"),
    ("query_logs", {"service": "a-svc", "start": START, "end": END, "level": "LOUD"}, "unknown level 'LOUD'"),
    ("query_logs", {"service": "a-svc", "start": START, "end": END, "limit": 100000}, "limit"),
    ("query_logs", {"service": "a-svc", "start": START, "end": END, "grep": "x"}, "grep: unexpected argument"),
    ("query_traces", {}, "unknown tool; available tools: get_current_time, lookup_knowledge, query_changes, query_logs, query_metrics"),
])
def test_bad_arguments_raise_a_clear_tool_error(registry: ToolRegistry, tool: str, arguments: dict, fragment: str) -> None:
    with pytest.raises(ToolArgumentError) as caught:
        registry.invoke(tool, arguments)
    assert fragment in str(caught.value)
    assert str(caught.value).startswith(f"{tool}: ")


def test_arguments_that_are_not_an_object_are_rejected(registry: ToolRegistry) -> None:
    with pytest.raises(ToolError, match="expected a JSON object"):
        registry.invoke("query_logs", ["payment"])  # type: ignore[arg-type]


def test_backend_failure_becomes_a_tool_error(tmp_path: Path) -> None:
    registry = build_default_registry(build_sql_backends(f"sqlite:///{tmp_path / 'empty.db'}"))  # never loaded
    with pytest.raises(ToolBackendError, match="backend failure"):
        registry.invoke("query_logs", {"service": "a-svc", "start": START, "end": END})


def test_get_current_time_is_a_helper_without_evidence(estate_url: str) -> None:
    engine = create_engine(estate_url)
    backends = ToolBackends(metrics=SqlMetricsBackend(engine), logs=SqlLogsBackend(engine), clock=lambda: ANCHOR + timedelta(seconds=42))
    result = build_default_registry(backends).invoke("get_current_time", {})
    assert result.evidence_status is None and result.evidence_refs() == []
    assert json.loads(result.agent_result) == {"now": "2026-11-29T11:00:42Z"}


def test_a_registry_can_hold_an_explicitly_registered_tool() -> None:
    registry = ToolRegistry()
    registry.register(ToolSpec(
        name="echo_time", description="test helper", arguments_model=GetCurrentTimeArguments, evidence_bearing=False,
        handler=lambda args: pytest.fail("not called"),
    ))
    assert registry.names() == ["echo_time"] and registry.get("echo_time").parameters["type"] == "object"


def test_unconfigured_backends_are_clear_tool_errors(estate_url: str) -> None:
    engine = create_engine(estate_url)
    registry = build_default_registry(ToolBackends(metrics=SqlMetricsBackend(engine), logs=SqlLogsBackend(engine)))
    with pytest.raises(ToolBackendError, match="no knowledge backend is configured"):
        registry.invoke("lookup_knowledge", {"query": "cpu"})
    with pytest.raises(ToolBackendError, match="no changes backend is configured"):
        registry.invoke("query_changes", {"start": START, "end": END})


ONSET_TEXT = re.compile(
    r"^(?P<service>\S+) (?P<metric>\S+) onset at (?P<ts>\S+): (?P<verb>rising|falling) from (?P<before>\S+) "
    r"\(median before\) to (?P<after>\S+) \(median after\)$"
)


def test_query_metrics_adds_an_onset_ref_for_a_series_that_changes(registry: ToolRegistry, incident) -> None:
    result = registry.invoke("query_metrics", {"service": incident.service, "start": START, "end": END})
    data = json.loads(result.agent_result)
    refs = _refs(result)
    by_metric = {s["metric"]: (i, s) for i, s in enumerate(data["series"])}
    i, series = by_metric[incident.metrics[0].metric]  # the incident's first metric changes inside the hour
    onset = series["onset"]
    match = ONSET_TEXT.match(refs[f"series[{i}].onset"])
    assert match, refs[f"series[{i}].onset"]
    assert (match["service"], match["metric"], match["ts"]) == (incident.service, series["metric"], onset["at"])
    assert match["verb"] == ("rising" if onset["direction"] == "up" else "falling")
    assert match["before"] == format_value(onset["before"], series["unit"])
    assert match["after"] == format_value(onset["after"], series["unit"])
    assert series["points"][onset["index"]][0] == onset["at"]
    ref = next(r for r in result.evidence_refs() if r.raw_path == f"series[{i}].onset")
    assert ref.timestamp == onset["at"]
    # A series without a change point has no onset, in the projection and in the refs.
    for j, other in enumerate(data["series"]):
        assert ("onset" in other) == (f"series[{j}].onset" in refs)
