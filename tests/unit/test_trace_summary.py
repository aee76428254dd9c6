"""tool_trace_summary: bounded entries that keep concrete facts first, gaps kept, repeats compacted."""

from __future__ import annotations

from services.executor.trace_summary import (
    MAX_ENTRY_OUTPUT_BYTES,
    MAX_INPUT_BYTES,
    MAX_TOTAL_BYTES,
    NO_NEW_EVIDENCE,
    build_tool_trace_summary,
)
from shared.core.contracts import EvidenceRef, RetrievalDetails, ToolInvocation
from shared.core.evidence_view import evidence_view
from shared.core.tool_results import MetricSeriesResult, MetricsResult, SeriesSummary, dump_result, rendered_refs

CITED_LINE = (
    "2026-11-29T10:31:07Z ERROR payment-service host=pay-2 HikariPool-1 - Connection is not available, "
    "request timed out after 30000ms"
)
WINDOW = {"start": "2026-11-29T10:00:00Z", "end": "2026-11-29T11:00:00Z"}


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _invocation(invocation_id: int, tool: str, refs: list[EvidenceRef] | None, *, status: str = "EVIDENCE_FOUND",
                lifecycle: str = "READY", round_: int = 0, error: str = "", deduped: bool = False,
                agent_result: str = "{}", **request) -> ToolInvocation:
    return ToolInvocation(
        invocation_id=invocation_id, run_id="run-1", tool_name=tool, round=round_, lifecycle=lifecycle,
        evidence_status=status, request={"tool": tool, **request}, agent_result=agent_result, error=error,
        retrieval_details=None if refs is None else RetrievalDetails(evidence_refs=refs, deduped=deduped),
    )


def _log_refs(lines: list[str], total: int | None = None) -> list[EvidenceRef]:
    refs = [EvidenceRef(raw_path=f"hits[{k}]", text=line) for k, line in enumerate(lines)]
    refs.append(EvidenceRef(raw_path="summary", text=f"query_logs service=payment-service: {total or len(lines)} matching lines"))
    return refs


def test_5mb_tool_output_stays_bounded_and_keeps_the_cited_error_line():
    noise = [
        f"2026-11-29T10:{k % 60:02d}:{k % 59:02d}Z INFO payment-service host=pay-1 request served path=/pay/{k} "
        + "payload=" + "x" * 420
        for k in range(10_000)
    ]
    lines = noise[:6000] + [CITED_LINE] + noise[6000:]
    agent_result = "{" + '"hits":"' + "y" * (5 * 1024 * 1024) + '"}'
    invocation = _invocation(41, "query_logs", _log_refs(lines), agent_result=agent_result, service="payment-service", **WINDOW)
    raw_bytes = sum(_size(ref.text) for ref in evidence_view(invocation).refs()) + _size(agent_result)
    assert raw_bytes > 5 * 1024 * 1024

    [entry] = build_tool_trace_summary([invocation])
    assert entry.source_invocation_ids == [41] and entry.trace_ref == "trace-41"
    assert entry.success and entry.evidence_level == "EVIDENCE_FOUND"
    assert _size(entry.output_summary) <= MAX_ENTRY_OUTPUT_BYTES
    assert _size(entry.input_summary) <= MAX_INPUT_BYTES
    # The concrete error line comes first, whole; the 10 000 noise lines fold into one counted fact.
    assert entry.output_summary.startswith(f"hits[6000]: {CITED_LINE}")
    assert "hits[0] (×10000): 2026-11-29T10:00:00Z INFO" in entry.output_summary
    assert "y" * 100 not in entry.output_summary  # the raw output is never passed through


def test_concrete_facts_come_before_boilerplate_and_metric_values_are_kept():
    points = [(f"2026-11-29T10:{j:02d}:00Z", 97.5 if j == 42 else 40.0 + j % 3) for j in range(50)]
    result = MetricsResult(
        tool="query_metrics", service="payment-service", start=WINDOW["start"], end=WINDOW["end"],
        series=[MetricSeriesResult(metric="cpu_usage", unit="percent", points=points, summary=SeriesSummary(
            count=50, min=40.0, median=41.0, max=97.5, max_at="2026-11-29T10:42:00Z"))],
        summary="query_metrics service=payment-service metric=* 10:00..11:00: 1 series, 50 points",
    )
    refs = [EvidenceRef(raw_path=ref.raw_path, text=ref.text) for ref in rendered_refs(result)]
    [entry] = build_tool_trace_summary([_invocation(7, "query_metrics", refs, agent_result=dump_result(result),
                                                    service="payment-service", **WINDOW)])
    text = entry.output_summary
    assert "max=97.5%" in text and "cpu_usage=97.5%" in text
    assert text.index("cpu_usage=97.5% at") < text.index("query_metrics service=")  # boilerplate last
    assert "payment-service" in entry.input_summary and '"tool"' not in entry.input_summary


def test_failed_and_no_hit_calls_are_kept_as_gaps_and_helpers_are_left_out():
    failed = _invocation(3, "query_metrics", None, status="ERROR", lifecycle="ERROR",
                         error="query_metrics: backend failure: OperationalError: database is locked", service="a-service")
    no_hit = _invocation(4, "query_changes", [EvidenceRef(raw_path="summary", text="query_changes service=a-service: 0 change records")],
                         status="NO_EVIDENCE", service="a-service")
    helper = _invocation(5, "get_current_time", [], status="EVIDENCE_FOUND")
    entries = build_tool_trace_summary([failed, helper, no_hit])
    assert [e.source_invocation_ids for e in entries] == [[3], [4]]
    gap_failed, gap_empty = entries
    assert not gap_failed.success and gap_failed.evidence_level == "ERROR"
    assert "调用失败" in gap_failed.output_summary and "database is locked" in gap_failed.output_summary
    assert not gap_empty.success and gap_empty.evidence_level == "NO_EVIDENCE"
    assert "无命中" in gap_empty.output_summary and "0 change records" in gap_empty.output_summary


def test_deduped_knowledge_is_marked_no_new_evidence():
    deduped = _invocation(9, "lookup_knowledge", [EvidenceRef(raw_path="summary", text='lookup_knowledge query="连接池": 1 documents, all already returned earlier in this run (deduped)')],
                          status="NO_EVIDENCE", deduped=True, query="连接池")
    [entry] = build_tool_trace_summary([deduped])
    assert entry.evidence_level == NO_NEW_EVIDENCE and not entry.success
    assert "无新证据" in entry.output_summary


def test_repeated_same_topic_calls_in_a_round_are_compacted_with_counts():
    first_miss = _invocation(20, "query_logs", _log_refs([]), status="NO_EVIDENCE", service="payment-service", contains="pool")
    failed = _invocation(21, "query_logs", None, status="ERROR", lifecycle="ERROR", error="query_logs: backend failure: timeout",
                         service="payment-service", contains="hikari")
    hit = _invocation(22, "query_logs", _log_refs([CITED_LINE]), service="payment-service", contains="timed out")
    later_hit = _invocation(23, "query_logs", _log_refs(["2026-11-29T10:40:00Z WARN payment-service host=pay-3 slow query 2300ms"]),
                            service="payment-service", level="WARN")
    other_round = _invocation(30, "query_logs", _log_refs([CITED_LINE]), round_=1, service="payment-service")
    other_service = _invocation(24, "query_logs", _log_refs([]), status="NO_EVIDENCE", service="order-service")
    entries = build_tool_trace_summary([first_miss, failed, hit, later_hit, other_service, other_round])

    assert [e.source_invocation_ids for e in entries] == [[20, 21, 22, 23], [24], [30]]
    merged = entries[0]
    assert merged.trace_ref == "trace-20-x4"
    assert merged.success and merged.evidence_level == "EVIDENCE_FOUND"
    text = merged.output_summary
    assert "4 次同主题调用" in text
    assert "有效命中 2" in text and "无命中 1" in text and "失败 1" in text
    assert f"首个有效命中 #22: hits[0]: {CITED_LINE}" in text
    assert text.index("#22") < text.index("#23")
    assert "+3 次同主题调用" in merged.input_summary


def test_a_group_without_any_hit_is_one_gap_entry():
    misses = [
        _invocation(50 + k, "query_metrics", [EvidenceRef(raw_path="summary", text="query_metrics service=x: 0 series")],
                    status="NO_EVIDENCE", service="x-service", metric="cpu_usage")
        for k in range(3)
    ]
    [entry] = build_tool_trace_summary(misses)
    assert entry.source_invocation_ids == [50, 51, 52]
    assert not entry.success and entry.evidence_level == "NO_EVIDENCE"
    assert "3 次同主题调用" in entry.output_summary and "无命中 3" in entry.output_summary


def test_the_whole_summary_stays_under_its_overall_bound():
    lines = [f"2026-11-29T10:00:{k:02d}Z ERROR svc host=h distinct failure number {k} " + "z" * 200 for k in range(40)]
    invocations = [
        _invocation(100 + n, "query_logs", _log_refs([line.replace("svc", f"svc-{n}") for line in lines]), service=f"svc-{n}")
        for n in range(60)
    ]
    entries = build_tool_trace_summary(invocations)
    assert len(entries) == 60
    total = sum(_size(e.output_summary) + _size(e.input_summary) for e in entries)
    assert total <= MAX_TOTAL_BYTES
    assert all("ERROR" in e.output_summary for e in entries)  # every entry still has its first fact
