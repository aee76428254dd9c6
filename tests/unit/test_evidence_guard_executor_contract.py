"""EvidenceGuard against what the executor really persists: the registry's tools over the demo
estate, run through the executor's ToolRunner into a SQLite invocation store, read back with
`list_for_run` as the gatekeeper service does. If a tool's projection drifts from the contract in
`services/gatekeeper/tool_projections.py`, this test says so."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.executor.estate import DEFAULT_ESTATE_DIR, load_estate, read_estate_description
from services.executor.servicer import ToolRunner
from services.executor.tools.registry import build_default_registry
from services.executor.tools.sql_backends import build_sql_backends
from services.gatekeeper.evidence_guard import guard_draft
from shared.core import guard_violations as codes
from shared.core.evidence_view import evidence_view
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
START, END = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"


@pytest.fixture(scope="module")
def persisted_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("guard-contract")
    estate_url, audit_url = f"sqlite:///{root / 'estate.db'}", f"sqlite:///{root / 'attest.db'}"
    load_estate(estate_url, DEFAULT_ESTATE_DIR, anchor=ANCHOR)
    upgrade(audit_url)
    sessions = make_session_factory(make_engine(audit_url))
    runs, store = RunStore(sessions), InvocationStore(sessions)
    run_id = runs.create_run(runs.create_session("guard-contract"), "why?", "SINGLE_REACT")
    incident = read_estate_description(DEFAULT_ESTATE_DIR).incidents[0]
    runner = ToolRunner(store, build_default_registry(build_sql_backends(estate_url)), run_id, 0)
    calls = {
        "logs": runner("query_logs", {"service": incident.service, "start": START, "end": END, "level": "ERROR"}),
        "metrics": runner("query_metrics", {"service": incident.service, "start": START, "end": END}),
        "nohit": runner("query_logs", {"service": incident.service, "start": START, "end": END, "contains": "no-such-line-zq"}),
        "changes": runner("query_changes", {"start": "2026-11-28T11:00:00Z", "end": END}),
        "knowledge": runner("lookup_knowledge", {"query": "连接池耗尽 超时"}),
        "knowledge_again": runner("lookup_knowledge", {"query": "连接池耗尽 超时"}),  # every hit deduped
        "time": runner("get_current_time", {}),
        "failed": runner("query_logs", {"service": incident.service, "start": END, "end": START}),
    }
    return run_id, store, calls


def test_the_executors_real_calls_pass_the_guard(persisted_run):
    run_id, store, calls = persisted_run
    assert calls["logs"].evidence_status == "EVIDENCE_FOUND" and calls["nohit"].evidence_status == "NO_EVIDENCE"
    draft = {
        "conclusion": {"text": "结论", "analysis_refs": ["a1", "a2"]},
        "analyses": [
            {"analysis_id": "a1", "kind": "NORMAL", "text": "ERROR 日志与指标异常",
             "tool_call_ids": [calls["logs"].tool_call_id, calls["metrics"].tool_call_id]},
            {"analysis_id": "a2", "kind": "NEGATIVE_OBSERVATION", "text": "没有匹配 no-such-line-zq 的日志",
             "tool_call_ids": [calls["nohit"].tool_call_id]},
        ],
    }
    result = guard_draft(run_id, draft, store.list_for_run(run_id))
    assert result.passed, result.violations
    (logs, metrics), (negative,) = (group.evidence for group in result.snapshot.analyses)
    ref_texts = {ref.text for ref in evidence_view(calls["logs"]).refs()}
    assert any(line in ref_texts for line in logs.excerpt.splitlines())  # verbatim system-side text
    assert logs.scope.startswith(f"end={END} level=ERROR service=")
    assert metrics.tool_name == "query_metrics" and metrics.timestamp == END
    assert negative.evidence_status == "NO_EVIDENCE" and "0 matching lines" in negative.excerpt
    assert "no-such-line-zq" in negative.scope
    text = result.snapshot.model_dump_json()
    assert not any(call.tool_call_id in text for call in calls.values())


def test_every_evidence_tools_projection_meets_the_contract(persisted_run):
    run_id, store, calls = persisted_run
    tools = {"logs", "metrics", "nohit", "changes", "knowledge", "knowledge_again"}
    assert {calls[name].tool_name for name in tools} == {"query_logs", "query_metrics", "query_changes", "lookup_knowledge"}
    assert calls["changes"].evidence_status == calls["knowledge"].evidence_status == "EVIDENCE_FOUND"
    assert calls["knowledge_again"].evidence_status == "NO_EVIDENCE" and calls["knowledge_again"].retrieval_details.deduped
    draft = {"conclusion": None, "analyses": [
        {"analysis_id": name, "kind": "NORMAL" if calls[name].evidence_status == "EVIDENCE_FOUND" else "NEGATIVE_OBSERVATION",
         "text": name, "tool_call_ids": [calls[name].tool_call_id]} for name in sorted(tools)]}
    result = guard_draft(run_id, draft, store.list_for_run(run_id))
    assert result.violations == [] and result.excluded_tool_call_ids == []
    assert sorted(group.analysis_id for group in result.snapshot.analyses) == sorted(tools)


def test_helper_and_failed_calls_are_not_evidence(persisted_run):
    run_id, store, calls = persisted_run
    assert calls["failed"].lifecycle == "ERROR"
    draft = {"conclusion": None, "analyses": [
        {"analysis_id": "a1", "kind": "NORMAL", "text": "t", "tool_call_ids": [calls["time"].tool_call_id, calls["failed"].tool_call_id]}]}
    result = guard_draft(run_id, draft, store.list_for_run(run_id))
    assert [v.code for v in result.violations] == [codes.PROJECTION_UNKNOWN_TOOL, codes.TOOL_REF_NOT_READY]
    assert result.excluded_tool_call_ids == [calls["time"].tool_call_id, calls["failed"].tool_call_id]
    assert result.snapshot.analyses == []
