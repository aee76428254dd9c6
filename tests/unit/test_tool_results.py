"""The typed tool result and its one renderer: a call's result is
stored once, its evidence refs are the renderer's view of it, and a stored result that breaks its
schema reads as None."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from services.executor.estate import DEFAULT_ESTATE_DIR, load_estate
from services.executor.tools.knowledge_dedupe import knowledge_hit_keys, mark_deduped
from services.executor.tools.registry import ToolRegistry, build_default_registry
from services.executor.tools.sql_backends import build_sql_backends
from shared.core.evidence_view import evidence_view
from shared.core.tool_results import (
    KnowledgeResult,
    LogsResult,
    MetricsResult,
    parse_path,
    read_result,
    ref_text,
    rendered_refs,
)
from shared.core.value_format import format_value
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
WINDOW = {"start": "2026-11-29T10:00:00Z", "end": "2026-11-29T11:00:00Z"}
CALLS = [
    ("query_metrics", {"service": "payment-service", **WINDOW}),
    ("query_metrics", {"service": "no-such-service", **WINDOW}),
    ("query_logs", {"service": "payment-service", "level": ["ERROR", "WARN"], **WINDOW}),
    ("query_logs", {"service": "payment-service", "contains": "nothing like this", **WINDOW}),
    ("query_changes", {**WINDOW}),
    ("lookup_knowledge", {"query": "数据库连接池耗尽", "top_k": 2}),
]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> ToolRegistry:
    url = f"sqlite:///{tmp_path_factory.mktemp('results') / 'estate.db'}"
    load_estate(url, DEFAULT_ESTATE_DIR, anchor=ANCHOR)
    return build_default_registry(build_sql_backends(url))


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> tuple[InvocationStore, str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('audit') / 'attest.db'}"
    upgrade(url)
    sessions = make_session_factory(make_engine(url))
    runs = RunStore(sessions)
    return InvocationStore(sessions), runs.create_run(runs.create_session("test"), "payment-service 怎么了？", "MULTI_AGENT")


@pytest.mark.parametrize(("tool", "arguments"), CALLS, ids=[f"{tool}-{i}" for i, (tool, _) in enumerate(CALLS)])
def test_a_stored_call_keeps_its_result_once_and_its_refs_are_the_renderers_view(
        registry: ToolRegistry, audit: tuple[InvocationStore, str], tool: str, arguments: dict) -> None:
    invocations, run_id = audit
    result = registry.invoke(tool, arguments)
    stored = read_result(tool, result.agent_result)
    assert stored is not None and stored.tool == tool
    invocation_id = invocations.begin(run_id, f"call-{tool}-{len(arguments)}", tool, 0, result.request_scope)
    invocations.complete(invocation_id, evidence_status=result.evidence_status, agent_result=result.agent_result,
                         source=result.source, ref_count=result.ref_count)
    [read_back] = invocations.get_many([invocation_id])
    details = read_back.retrieval_details
    assert details is not None and details.evidence_refs == [] and details.refs_rendered  # no list is stored
    view = evidence_view(read_back)
    rendered = rendered_refs(stored)
    assert [(ref.raw_path, ref.text, ref.timestamp) for ref in view.refs()] == [
        (ref.raw_path, ref.text, ref.timestamp) for ref in rendered
    ]
    assert view.count() == details.ref_count == len(rendered)
    assert invocations.accounts_for_run(run_id)[-1].evidence_refs == len(rendered)
    for ref in rendered:
        assert ref_text(stored, ref.raw_path) == ref.text
        [found] = view.at(ref.raw_path)
        assert (found.text, found.timestamp, found.source) == (ref.text, ref.timestamp, ref.document or result.source)
    assert result.source  # every ref names its backend


def test_the_result_reads_as_its_typed_schema(registry: ToolRegistry) -> None:
    metrics = read_result("query_metrics", registry.invoke("query_metrics", {"service": "payment-service", **WINDOW}).agent_result)
    assert isinstance(metrics, MetricsResult) and metrics.series and metrics.point_count > 0
    series = metrics.series[0]
    assert series.summary is not None and series.summary.max == max(series.values)
    stamp, value = series.points[0]
    assert ref_text(metrics, "series[0].points[0]") == f"payment-service {series.metric}={format_value(value, series.unit)} at {stamp}"

    logs = read_result("query_logs", registry.invoke("query_logs", {"service": "payment-service", **WINDOW}).agent_result)
    assert isinstance(logs, LogsResult) and logs.hits and logs.total_matches >= len(logs.hits)
    assert ref_text(logs, "hits[0]").startswith(f"{logs.hits[0].ts} {logs.hits[0].level} payment-service host=")


def test_a_deduped_chunk_has_no_ref_and_the_summary_says_so(registry: ToolRegistry) -> None:
    first = registry.invoke("lookup_knowledge", {"query": "数据库连接池耗尽", "top_k": 2})
    again = mark_deduped(registry.invoke("lookup_knowledge", {"query": "数据库连接池耗尽", "top_k": 2}), knowledge_hit_keys(first))
    stored = read_result("lookup_knowledge", again.agent_result)
    assert isinstance(stored, KnowledgeResult) and stored.fresh_chunk_count == 0
    assert [ref.raw_path for ref in rendered_refs(stored)] == ["summary"] == [ref.raw_path for ref in again.evidence_refs()]
    assert ref_text(stored, "summary") == again.evidence_refs()[0].text


@pytest.mark.parametrize("breakage", [
    lambda data: data["series"][0]["points"][0].__setitem__(1, "12.5"),  # a number as a string
    lambda data: data["series"][0]["points"][0].__setitem__(1, True),  # a bool for a number
    lambda data: data["series"][0]["summary"].__setitem__("count", -1),
    lambda data: data["series"][0].pop("metric"),
    lambda data: data.pop("series"),
    lambda data: data.__setitem__("tool", "query_logs"),
], ids=["string-number", "bool-number", "negative-count", "no-metric", "no-series", "other-tool"])
def test_a_result_that_breaks_its_schema_reads_as_none(registry: ToolRegistry, breakage) -> None:
    data = json.loads(registry.invoke("query_metrics", {"service": "payment-service", **WINDOW}).agent_result)
    breakage(data)
    assert read_result("query_metrics", json.dumps(data)) is None


def test_non_finite_numbers_and_non_objects_read_as_none(registry: ToolRegistry) -> None:
    text = registry.invoke("query_metrics", {"service": "payment-service", **WINDOW}).agent_result
    data = json.loads(text)
    value = data["series"][0]["points"][0][1]
    assert read_result("query_metrics", text.replace(json.dumps(value), "NaN", 1)) is None
    for other in ("", "[]", "not json", "null"):
        assert read_result("query_metrics", other) is None
    assert read_result("get_current_time", text) is None


@pytest.mark.parametrize(("raw_path", "parsed"), [
    ("series[2].points[17]", ("series", 2, 17, "points")),
    ("series[0].summary", ("series", 0, -1, "summary")),
    ("series[1].top", ("series", 1, -1, "top")),
    ("hits[4]", ("hits", 4, -1, "")),
    ("docs[1].chunks[0]", ("docs", 1, 0, "chunks")),
    ("summary", ("summary", -1, -1, "")),
    ("series[0]points[1]", None),
    ("series[-1].summary", None),
    ("hits[0].message", None),
])
def test_raw_paths_follow_one_grammar(raw_path: str, parsed: tuple | None) -> None:
    assert parse_path(raw_path) == parsed
