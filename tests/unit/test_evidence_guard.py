"""EvidenceGuard, one case per scenario of single-react-evidence-semantic-guards.

The run's invocations look like the executor's: `query_logs` / `query_metrics` projections whose
evidence refs mirror them, a bounded request scope, tool call ids from the executor's column.
Every failing case starts from a Draft that passes (`test_valid_concluded_draft_passes...`) and
changes one thing, so each case shows exactly what the guard rejects.
"""

from __future__ import annotations

import copy
import json
import random

import pytest

from services.gatekeeper.evidence_guard import guard_draft
from shared.core import guard_violations as codes
from shared.core.contracts import ToolInvocation
from shared.draft_contract import Draft, EvidenceGuardResult

RUN = "run-guard"
OTHER_RUN = "run-other"
START, END = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"
SOURCE = "sql:estate"
TIMEOUT_LINE = "upstream timeout calling db-primary after 3000ms"


def _request(tool: str, **extra) -> dict:
    return {"tool": tool, "service": "payment-service", "start": START, "end": END, **extra}


def logs_invocation(invocation_id, tool_call_id, messages, *, run=RUN, lifecycle="READY", status=None,
                    projection_overrides=None, agent_result=None, refs=None, request=None) -> ToolInvocation:
    stamps = [f"2026-11-29T10:{10 + k % 50:02d}:00Z" for k in range(len(messages))]
    summary = f"query_logs service=payment-service level=ERROR {START}..{END}: {len(messages)} matching lines"
    projection = {
        "tool": "query_logs", "service": "payment-service", "level": ["ERROR"], "contains": None,
        "start": START, "end": END, "total_matches": len(messages), "returned": len(messages),
        "hits": [{"ts": ts, "level": "ERROR", "host": "node-1", "message": m} for ts, m in zip(stamps, messages)],
        "summary": summary,
    }
    projection.update(projection_overrides or {})
    if refs is None:
        refs = [
            {"raw_path": f"hits[{k}]", "text": f"{ts} ERROR payment-service host=node-1 {m}", "source": SOURCE, "timestamp": ts}
            for k, (ts, m) in enumerate(zip(stamps, messages))
        ] + [{"raw_path": "summary", "text": summary, "source": SOURCE, "timestamp": END}]
    return ToolInvocation(
        invocation_id=invocation_id,
        run_id=run,
        tool_call_id=tool_call_id,
        tool_name="query_logs",
        lifecycle=lifecycle,
        evidence_status=status or ("EVIDENCE_FOUND" if messages else "NO_EVIDENCE"),
        request=_request("query_logs", level="ERROR") if request is None else request,
        agent_result=json.dumps(projection, ensure_ascii=False) if agent_result is None else agent_result,
        retrieval_details={"evidence_refs": refs},
    )


def metrics_invocation(invocation_id, tool_call_id, values, *, run=RUN) -> ToolInvocation:
    points = [[f"2026-11-29T10:{30 + k:02d}:00Z", v] for k, v in enumerate(values)]
    summary = f"query_metrics service=payment-service metric=cpu_usage {START}..{END}: 1 series, {len(values)} points"
    series_summary = f"payment-service cpu_usage {START}..{END}: {len(values)} points, max={max(values)}% at {points[-1][0]}"
    projection = {
        "tool": "query_metrics", "service": "payment-service", "metric": "cpu_usage", "start": START, "end": END,
        "step_seconds": 60, "series_truncated": False, "summary": summary,
        "series": [{"metric": "cpu_usage", "unit": "percent", "points": points, "summary": {
            "count": len(values), "min": min(values), "median": sorted(values)[len(values) // 2], "max": max(values),
            "max_at": points[values.index(max(values))][0]}}],
    }
    refs = [
        {"raw_path": f"series[0].points[{k}]", "text": f"payment-service cpu_usage={v}% at {ts}", "source": SOURCE, "timestamp": ts}
        for k, (ts, v) in enumerate(points)
    ]
    refs += [
        {"raw_path": "series[0].summary", "text": series_summary, "source": SOURCE, "timestamp": END},
        {"raw_path": "summary", "text": summary, "source": SOURCE, "timestamp": END},
    ]
    return ToolInvocation(
        invocation_id=invocation_id, run_id=run, tool_call_id=tool_call_id, tool_name="query_metrics",
        lifecycle="READY", evidence_status="EVIDENCE_FOUND", request=_request("query_metrics", metric="cpu_usage"),
        agent_result=json.dumps(projection), retrieval_details={"evidence_refs": refs},
    )


def run_invocations() -> list[ToolInvocation]:
    return [
        logs_invocation(1, "call-logs", [TIMEOUT_LINE]),
        logs_invocation(2, "call-nohit", []),
        metrics_invocation(3, "call-cpu", [41.0, 63.5, 92.0]),
        ToolInvocation(invocation_id=4, run_id=RUN, tool_call_id="call-projecting", tool_name="query_logs",
                       lifecycle="PROJECTING", request=_request("query_logs")),
        ToolInvocation(invocation_id=5, run_id=RUN, tool_call_id="call-error", tool_name="query_logs",
                       lifecycle="ERROR", evidence_status="ERROR", request=_request("query_logs"), error="backend down"),
        logs_invocation(6, "call-ready-error", [TIMEOUT_LINE], status="ERROR"),
        logs_invocation(7, "call-no-result", [TIMEOUT_LINE], agent_result=""),
        logs_invocation(8, "call-unreferenced", ["UNREFERENCED-MARKER disk full on node-9"]),
        # Another run's rows: one with an id only it has, one reusing this run's id.
        logs_invocation(20, "call-foreign", ["FOREIGN-MARKER connection refused"], run=OTHER_RUN),
        logs_invocation(21, "call-logs", ["FOREIGN-MARKER other run's line"], run=OTHER_RUN),
    ]


def concluded_draft() -> dict:
    return {
        "conclusion": {"text": "payment-service 的超时来自 db-primary 的上游超时。", "analysis_refs": ["a1"]},
        "analyses": [
            {"analysis_id": "a1", "kind": "NORMAL", "text": "日志出现 upstream timeout calling db-primary after 3000ms",
             "tool_call_ids": ["call-logs"]},
            {"analysis_id": "a2", "kind": "NORMAL", "text": "CPU 最高 92%", "tool_call_ids": ["call-cpu"]},
            {"analysis_id": "a3", "kind": "NEGATIVE_OBSERVATION", "text": "该时间窗内没有其他 ERROR 日志匹配查询条件",
             "tool_call_ids": ["call-nohit"]},
        ],
        "action_plan": [{"text": "检查 db-primary 连接池", "analysis_refs": ["a1"], "requires_human_confirmation": True}],
        "recommendations": [{"text": "为 db-primary 调用设置熔断", "analysis_refs": ["a1", "a3"]}],
        "limitations": ["只查询了最近一小时"],
        "missing_context": [],
    }


def guard(draft, invocations=None) -> EvidenceGuardResult:
    return guard_draft(RUN, draft, run_invocations() if invocations is None else invocations)


def codes_of(result: EvidenceGuardResult) -> list[str]:
    return [v.code for v in result.violations]


def snapshot_text(result: EvidenceGuardResult) -> str:
    return result.snapshot.model_dump_json()


# --- the passing Draft ----------------------------------------------------------------------------


def test_valid_concluded_draft_passes_with_a_snapshot_grouped_by_analysis():
    result = guard(concluded_draft())
    assert result.passed, result.violations
    assert result.violations == [] and result.excluded_tool_call_ids == []
    groups = {group.analysis_id: group.evidence for group in result.snapshot.analyses}
    assert list(groups) == ["a1", "a2", "a3"]
    logs, = groups["a1"]
    assert logs.tool_name == "query_logs" and logs.evidence_status == "EVIDENCE_FOUND"
    assert logs.source == SOURCE and logs.timestamp == END
    assert logs.scope == f"end={END} level=ERROR service=payment-service start={START}"
    assert TIMEOUT_LINE in logs.excerpt and "1 matching lines" in logs.excerpt
    cpu, = groups["a2"]
    assert "max=92.0%" in cpu.excerpt and "metric=cpu_usage" in cpu.scope


def test_snapshot_has_no_tool_call_id_raw_response_or_unreferenced_invocation():
    result = guard(concluded_draft())
    text = snapshot_text(result)
    for invocation in run_invocations():
        assert invocation.tool_call_id not in text
    assert "UNREFERENCED-MARKER" not in text and "FOREIGN-MARKER" not in text
    assert '"hits"' not in text and "node-1\\\", \\\"message" not in text  # no projection JSON copied
    assert {e.tool_name for g in result.snapshot.analyses for e in g.evidence} == {"query_logs", "query_metrics"}


def test_same_input_gives_the_same_result_whatever_the_row_order():
    rows = run_invocations()
    first = guard_draft(RUN, concluded_draft(), rows)
    random.Random(4).shuffle(rows)
    assert guard_draft(RUN, Draft.model_validate(concluded_draft()), rows) == first


def test_valid_negative_observation_keeps_its_query_scope_and_zero_matches():
    result = guard(concluded_draft())
    negative, = next(g.evidence for g in result.snapshot.analyses if g.analysis_id == "a3")
    assert negative.evidence_status == "NO_EVIDENCE"
    assert negative.excerpt == f"query_logs service=payment-service level=ERROR {START}..{END}: 0 matching lines"
    assert "service=payment-service" in negative.scope and START in negative.scope


def test_excerpt_shows_the_refs_the_analysis_talks_about_within_its_bound():
    messages = [f"request {k} served in {k}ms" for k in range(300)]
    messages[250] = "pool exhausted: 50/50 connections busy"
    rows = [logs_invocation(1, "call-many", messages)]
    draft = {"conclusion": {"text": "连接池耗尽", "analysis_refs": ["a1"]},
             "analyses": [{"analysis_id": "a1", "kind": "NORMAL", "text": "db pool exhausted, 50/50 connections busy",
                           "tool_call_ids": ["call-many"]}]}
    result = guard_draft(RUN, draft, rows)
    assert result.passed
    excerpt = result.snapshot.analyses[0].evidence[0].excerpt
    assert "pool exhausted: 50/50 connections busy" in excerpt
    assert excerpt.splitlines()[0].endswith("300 matching lines")
    assert excerpt.splitlines()[-1].startswith("(+") and len(excerpt) <= 2100


# --- concluded Drafts that fail -------------------------------------------------------------------


def _with(path_value_pairs):
    def change(draft):
        for path, value in path_value_pairs:
            node = draft
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        return draft
    return change


# (case, change to the passing Draft, expected code, analysis_id, tool_call_id of that violation)
FAILING = [
    ("blank analysis id", _with([(("analyses", 1, "analysis_id"), "  ")]), codes.ANALYSIS_ID_BLANK, "", ""),
    ("duplicate analysis id", _with([(("analyses", 1, "analysis_id"), "a1")]), codes.ANALYSIS_ID_DUPLICATE, "a1", ""),
    ("unsupported kind", _with([(("analyses", 1, "kind"), None)]), codes.ANALYSIS_KIND_UNSUPPORTED, "a2", ""),
    ("blank analysis text", _with([(("analyses", 0, "text"), " \n")]), codes.ANALYSIS_TEXT_BLANK, "a1", ""),
    ("analysis without tool call id", _with([(("analyses", 1, "tool_call_ids"), [])]), codes.ANALYSIS_TOOL_CALLS_MISSING, "a2", ""),
    ("analysis with only a blank tool call id", _with([(("analyses", 1, "tool_call_ids"), [" "])]), codes.ANALYSIS_TOOL_CALLS_MISSING, "a2", ""),
    ("conclusion with empty references", _with([(("conclusion", "analysis_refs"), [])]), codes.REPORT_REFS_MISSING, "", ""),
    ("conclusion with an unknown reference", _with([(("conclusion", "analysis_refs"), ["a9"])]), codes.REPORT_REF_UNKNOWN, "a9", ""),
    ("conclusion with a blank reference", _with([(("conclusion", "analysis_refs"), ["a1", " "])]), codes.REPORT_REF_UNKNOWN, " ", ""),
    ("ids are compared as written", _with([(("analyses", 0, "analysis_id"), " a1")]), codes.REPORT_REF_UNKNOWN, "a1", ""),
    ("blank conclusion text", _with([(("conclusion", "text"), "")]), codes.REPORT_TEXT_BLANK, "", ""),
    ("action plan item with an unknown reference", _with([(("action_plan", 0, "analysis_refs"), ["a1", "a7"])]), codes.REPORT_REF_UNKNOWN, "a7", ""),
    ("action plan item with empty references", _with([(("action_plan", 0, "analysis_refs"), [])]), codes.REPORT_REFS_MISSING, "", ""),
    ("recommendation with empty references", _with([(("recommendations", 0, "analysis_refs"), [])]), codes.REPORT_REFS_MISSING, "", ""),
    ("recommendation referencing a blank-id analysis", _with([(("analyses", 2, "analysis_id"), ""), (("recommendations", 0, "analysis_refs"), [""])]),
     codes.REPORT_REF_UNKNOWN, "", ""),
    ("fabricated tool call", _with([(("analyses", 0, "tool_call_ids"), ["call-logs", "call-made-up"])]), codes.TOOL_REF_NOT_FOUND, "a1", "call-made-up"),
    ("cross-run tool call", _with([(("analyses", 0, "tool_call_ids"), ["call-foreign"])]), codes.TOOL_REF_OTHER_RUN, "a1", "call-foreign"),
    ("PROJECTING tool call", _with([(("analyses", 0, "tool_call_ids"), ["call-projecting"])]), codes.TOOL_REF_NOT_READY, "a1", "call-projecting"),
    ("ERROR tool call", _with([(("analyses", 0, "tool_call_ids"), ["call-error"])]), codes.TOOL_REF_NOT_READY, "a1", "call-error"),
    ("READY call with evidence_status ERROR", _with([(("analyses", 0, "tool_call_ids"), ["call-ready-error"])]), codes.TOOL_REF_EVIDENCE_STATUS, "a1", "call-ready-error"),
    ("call without agent_result", _with([(("analyses", 0, "tool_call_ids"), ["call-no-result"])]), codes.TOOL_REF_AGENT_RESULT_MISSING, "a1", "call-no-result"),
    ("tool call id with surrounding spaces", _with([(("analyses", 0, "tool_call_ids"), [" call-logs"])]), codes.TOOL_REF_NOT_FOUND, "a1", " call-logs"),
    ("blank tool call id beside a valid one", _with([(("analyses", 0, "tool_call_ids"), ["call-logs", ""])]), codes.TOOL_REF_BLANK, "a1", ""),
    ("NORMAL citing NO_EVIDENCE", _with([(("analyses", 0, "tool_call_ids"), ["call-nohit"])]), codes.KIND_NORMAL_WITHOUT_EVIDENCE, "a1", "call-nohit"),
    ("NEGATIVE_OBSERVATION citing EVIDENCE_FOUND", _with([(("analyses", 2, "tool_call_ids"), ["call-logs"])]), codes.KIND_NEGATIVE_WITH_EVIDENCE, "a3", "call-logs"),
]


@pytest.mark.parametrize("case, change, code, analysis_id, tool_call_id", FAILING, ids=[row[0] for row in FAILING])
def test_concluded_draft_is_rejected(case, change, code, analysis_id, tool_call_id):
    result = guard(change(concluded_draft()))
    assert not result.passed
    matching = [v for v in result.violations if v.code == code]
    assert matching, f"{case}: expected {code}, got {codes_of(result)}"
    assert (matching[0].analysis_id, matching[0].tool_call_id) == (analysis_id, tool_call_id)
    assert result.snapshot.analyses == []  # nothing of a rejected Draft is verified
    assert result.excluded_tool_call_ids == []
    assert "FOREIGN-MARKER" not in result.model_dump_json()  # no record content in the details


def test_the_current_runs_row_is_resolved_even_when_another_run_reuses_its_tool_call_id():
    result = guard(concluded_draft())
    assert result.passed
    assert "FOREIGN-MARKER" not in snapshot_text(result)
    only_other = [row for row in run_invocations() if row.run_id == OTHER_RUN]
    rejected = guard(concluded_draft(), only_other)
    assert not rejected.passed
    assert {(v.code, v.tool_call_id) for v in rejected.violations} >= {(codes.TOOL_REF_OTHER_RUN, "call-logs")}


def test_two_current_run_rows_with_one_tool_call_id_are_ambiguous():
    rows = run_invocations() + [logs_invocation(30, "call-logs", ["another line"])]
    result = guard(concluded_draft(), rows)
    assert not result.passed and codes.TOOL_REF_AMBIGUOUS in codes_of(result)


# --- strict projection parsing --------------------------------------------------------------------


PROJECTION_CASES = [
    ("invalid JSON", dict(agent_result="{not json"), codes.PROJECTION_INVALID_JSON),
    ("JSON but not an object", dict(agent_result="[1, 2]"), codes.PROJECTION_INVALID_JSON),
    ("projection without its tool name", dict(projection_overrides={"tool": None}), codes.PROJECTION_TOOL_MISMATCH),
    ("projection of another tool", dict(projection_overrides={"tool": "query_metrics"}), codes.PROJECTION_TOOL_MISMATCH),
    ("projection with another tool_call_id", dict(projection_overrides={"tool_call_id": "call-x"}), codes.PROJECTION_TOOL_CALL_ID_MISMATCH),
    ("projection stating another status", dict(projection_overrides={"evidence_status": "NO_EVIDENCE"}), codes.PROJECTION_STATUS_MISMATCH),
    ("EVIDENCE_FOUND record whose projection has no hits", dict(projection_overrides={"hits": [], "returned": 0}, refs=[
        {"raw_path": "service", "text": "payment-service"}, {"raw_path": "summary", "text": "0 matching lines"}]), codes.PROJECTION_STATUS_MISMATCH),
    ("hit refs beyond the projection's hits", dict(projection_overrides={"hits": [], "returned": 0}), codes.PROJECTION_CONTRACT),
    ("returned count disagrees with hits", dict(projection_overrides={"returned": 7}), codes.PROJECTION_CONTRACT),
    ("ref path that is not in the projection", dict(refs=[{"raw_path": "hits[5]", "text": TIMEOUT_LINE}, {"raw_path": "summary", "text": "s"}]), codes.PROJECTION_CONTRACT),
    ("record without evidence refs", dict(refs=[]), codes.PROJECTION_CONTRACT),
    ("EVIDENCE_FOUND record with only its summary ref", dict(refs=[{"raw_path": "summary", "text": "s"}]), codes.PROJECTION_STATUS_MISMATCH),
    ("record without request scope", dict(request={"tool": "query_logs"}), codes.PROJECTION_SCOPE_MISSING),
]


@pytest.mark.parametrize("case, overrides, code", PROJECTION_CASES, ids=[row[0] for row in PROJECTION_CASES])
def test_projection_contract_mismatch_fails_closed(case, overrides, code):
    rows = [row for row in run_invocations() if row.tool_call_id != "call-logs" or row.run_id != RUN]
    rows.append(logs_invocation(1, "call-logs", [TIMEOUT_LINE], **overrides))
    result = guard(concluded_draft(), rows)
    assert not result.passed
    assert [(v.code, v.tool_call_id) for v in result.violations] == [(code, "call-logs")], case


def test_no_evidence_record_whose_projection_has_hits_fails_closed():
    rows = [logs_invocation(2, "call-nohit", [TIMEOUT_LINE], status="NO_EVIDENCE")]
    draft = {"conclusion": None, "analyses": [{"analysis_id": "n", "kind": "NEGATIVE_OBSERVATION", "text": "无", "tool_call_ids": ["call-nohit"]}]}
    result = guard_draft(RUN, draft, rows)
    assert codes_of(result) == [codes.PROJECTION_STATUS_MISMATCH] and result.excluded_tool_call_ids == ["call-nohit"]


def _knowledge(status: str, deduped: bool) -> ToolInvocation:
    chunk = {"heading": "排查步骤", "score": 3.2, "hit_id": "runbooks/db.md#ab12"}
    chunk.update({"deduped": True} if deduped else {"text": "## 排查步骤 检查连接池"})
    refs = [] if deduped else [{"raw_path": "docs[0].chunks[0]", "text": "## 排查步骤 检查连接池", "source": "runbooks/db.md"}]
    refs.append({"raw_path": "summary", "text": 'lookup_knowledge query="连接池" top_k=5: 1 documents, 1 chunks'})
    projection = {"tool": "lookup_knowledge", "query": "连接池", "top_k": 5, "summary": "s",
                  "docs": [{"path": "runbooks/db.md", "title": "db", "kind": "runbook", "score": 3.2, "chunks": [chunk]}]}
    return ToolInvocation(invocation_id=11, run_id=RUN, tool_call_id="call-kb", tool_name="lookup_knowledge", lifecycle="READY",
                          evidence_status=status, request={"tool": "lookup_knowledge", "query": "连接池", "top_k": 5},
                          agent_result=json.dumps(projection, ensure_ascii=False), retrieval_details={"evidence_refs": refs})


@pytest.mark.parametrize("status, deduped, kind, code", [
    ("EVIDENCE_FOUND", False, "NORMAL", None),
    ("NO_EVIDENCE", True, "NEGATIVE_OBSERVATION", None),  # every hit was returned earlier: no new evidence
    ("EVIDENCE_FOUND", True, "NORMAL", codes.PROJECTION_STATUS_MISMATCH),
])
def test_knowledge_projection_counts_only_chunks_not_deduped(status, deduped, kind, code):
    draft = {"conclusion": None, "analyses": [{"analysis_id": "k", "kind": kind, "text": "连接池", "tool_call_ids": ["call-kb"]}]}
    result = guard_draft(RUN, draft, [_knowledge(status, deduped)])
    assert codes_of(result) == ([code] if code else [])
    assert (result.snapshot.analyses != []) == (code is None)


def test_helper_tool_is_not_evidence():
    rows = [ToolInvocation(invocation_id=9, run_id=RUN, tool_call_id="call-time", tool_name="get_current_time", lifecycle="READY",
                           evidence_status="EVIDENCE_FOUND", request={"tool": "get_current_time", "tz": "UTC"},
                           agent_result='{"now": "2026-11-29T11:00:00Z"}', retrieval_details={"evidence_refs": [{"raw_path": "now", "text": "now"}]})]
    draft = concluded_draft()
    draft["analyses"] = draft["analyses"][:1]
    draft["analyses"][0]["tool_call_ids"] = ["call-time"]
    draft["recommendations"] = []
    result = guard_draft(RUN, draft, rows)
    assert codes_of(result) == [codes.PROJECTION_UNKNOWN_TOOL]


# --- conclusion=null ------------------------------------------------------------------------------


def test_no_conclusion_draft_with_valid_negative_observation_is_accepted():
    draft = {"conclusion": None, "analyses": [
        {"analysis_id": "n1", "kind": "NEGATIVE_OBSERVATION", "text": "没有 ERROR 日志", "tool_call_ids": ["call-nohit"]}],
        "missing_context": ["告警名称"]}
    result = guard(draft)
    assert result.passed and result.violations == [] and result.excluded_tool_call_ids == []
    evidence, = result.snapshot.analyses[0].evidence
    assert evidence.evidence_status == "NO_EVIDENCE" and "0 matching lines" in evidence.excerpt


@pytest.mark.parametrize("bad_ref, code", [
    ("call-made-up", codes.TOOL_REF_NOT_FOUND),
    ("call-foreign", codes.TOOL_REF_OTHER_RUN),
    ("call-projecting", codes.TOOL_REF_NOT_READY),
    ("call-error", codes.TOOL_REF_NOT_READY),
    ("call-ready-error", codes.TOOL_REF_EVIDENCE_STATUS),
    ("call-no-result", codes.TOOL_REF_AGENT_RESULT_MISSING),
    ("call-nohit", codes.KIND_NORMAL_WITHOUT_EVIDENCE),
])
def test_no_conclusion_draft_excludes_a_bad_reference_and_keeps_the_genuine_one(bad_ref, code):
    draft = {"conclusion": None, "analyses": [
        {"analysis_id": "a1", "kind": "NORMAL", "text": "upstream timeout", "tool_call_ids": [bad_ref, "call-logs"]}]}
    result = guard(draft)
    assert result.passed  # no structure requirement, no rejection: Release decides deterministically
    assert result.excluded_tool_call_ids == [bad_ref]
    assert [(v.code, v.analysis_id, v.tool_call_id) for v in result.violations] == [(code, "a1", bad_ref)]
    evidence, = result.snapshot.analyses[0].evidence  # only the genuine call is published
    assert TIMEOUT_LINE in evidence.excerpt
    assert "FOREIGN-MARKER" not in result.model_dump_json()


def test_no_conclusion_draft_has_no_structure_requirement():
    draft = {"conclusion": None, "analyses": [
        {"analysis_id": "", "kind": "NORMAL", "text": "", "tool_call_ids": ["call-logs"]},
        {"analysis_id": "dup", "kind": "NORMAL", "text": "x", "tool_call_ids": []},
        {"analysis_id": "dup", "kind": "NORMAL", "text": "y", "tool_call_ids": ["call-cpu"]}],
        "recommendations": [{"text": "", "analysis_refs": ["nowhere"]}]}
    result = guard(draft)
    assert result.passed and result.violations == []
    assert [g.analysis_id for g in result.snapshot.analyses] == ["", "dup"]


def test_no_conclusion_draft_with_unsupported_kind_excludes_its_references():
    draft = {"conclusion": None, "analyses": [{"analysis_id": "k", "kind": None, "text": "t", "tool_call_ids": ["call-logs"]}]}
    result = guard(draft)
    assert result.passed and result.snapshot.analyses == []
    assert result.excluded_tool_call_ids == ["call-logs"]
    assert codes_of(result) == [codes.ANALYSIS_KIND_UNSUPPORTED]


def test_no_conclusion_draft_with_only_fabricated_references_publishes_nothing():
    draft = {"conclusion": None, "analyses": [
        {"analysis_id": "a", "kind": "NORMAL", "text": "t", "tool_call_ids": ["call-made-up", "call-foreign"]}]}
    result = guard(draft)
    assert result.snapshot.analyses == []
    assert result.excluded_tool_call_ids == ["call-made-up", "call-foreign"]


# --- bounds and fail-closed -----------------------------------------------------------------------


@pytest.mark.parametrize("change", [
    lambda d: d["analyses"].extend(copy.deepcopy(d["analyses"][0]) for _ in range(200)),
    lambda d: d["analyses"][0].update(tool_call_ids=[f"c{k}" for k in range(60)]),
    lambda d: d["analyses"][0].update(text="x" * 9000),
    lambda d: d["recommendations"].extend({"text": "r", "analysis_refs": ["a1"]} for _ in range(150)),
    lambda d: d["limitations"].append("x" * 9000),
])
def test_oversized_draft_is_rejected_with_or_without_conclusion(change):
    draft = concluded_draft()
    change(draft)
    for candidate in (draft, dict(draft, conclusion=None)):
        result = guard(candidate)
        assert not result.passed and codes_of(result) == [codes.DRAFT_TOO_LARGE]
        assert result.snapshot.analyses == []


def test_oversized_conclusion_references_are_rejected():
    draft = concluded_draft()
    draft["conclusion"]["analysis_refs"] = ["a1"] * 101
    assert codes_of(guard(draft)) == [codes.DRAFT_TOO_LARGE]


@pytest.mark.parametrize("value", [None, 5, "text", [], {"analyses": "x"}, {"analyses": [{"analysis_id": 3}]},
                                   {"analyses": [{"kind": "POSITIVE"}]}, {"conclusion": "yes"}])
def test_unreadable_draft_is_a_violation_not_an_exception(value):
    result = guard_draft(RUN, value, run_invocations())
    assert not result.passed and codes_of(result) == [codes.DRAFT_INVALID]


def test_garbage_invocations_and_run_id_never_raise():
    rows = [None, 3, {"invocation_id": "x"}, {"invocation_id": 1, "run_id": RUN, "tool_name": "query_logs", "tool_call_id": "call-logs",
            "lifecycle": "READY", "evidence_status": "EVIDENCE_FOUND", "agent_result": "{}"}]
    result = guard_draft(RUN, concluded_draft(), rows)
    assert not result.passed
    assert guard_draft(None, concluded_draft(), run_invocations()).passed is False  # type: ignore[arg-type]
    assert guard_draft("", concluded_draft(), [row.model_copy(update={"run_id": ""}) for row in run_invocations()]).passed is False
    assert guard_draft(RUN, concluded_draft(), None).passed is False  # type: ignore[arg-type]


def test_an_internal_defect_fails_closed(monkeypatch):
    from services.gatekeeper import evidence_guard

    def broken(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(evidence_guard, "parse_projection", broken)
    result = guard(concluded_draft())
    assert not result.passed and codes_of(result) == [codes.GUARD_INTERNAL_ERROR]
    assert result.snapshot.analyses == []


def test_every_code_is_documented():
    used = {value for name, value in vars(codes).items() if name.isupper() and isinstance(value, str) and "." in value}
    assert used == set(codes.VIOLATION_CODES)
