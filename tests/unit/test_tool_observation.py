"""What the OpenAI engine shows the model of one invocation: id, status, and a bounded choice of
evidence refs (the most telling ones) with their exact raw_path and text."""

from __future__ import annotations

import json

from services.executor.openai_agent import MAX_OBSERVATION_CHARS, tool_observation, user_message
from shared.core.contracts import EvidenceRef, Plan, PlannedToolCall, RetrievalDetails, TimeWindow, ToolInvocation
from shared.core.evidence_view import evidence_view
from shared.core.tool_results import MetricSeriesResult, MetricsResult, SeriesSummary, dump_result, rendered_refs


def _metrics_invocation() -> ToolInvocation:
    """A stored metrics result of three 240-point series, one with a spike, and its rendered refs."""
    series = []
    for metric in ["cpu_usage", "memory_usage", "gc_pause_ms"]:
        points = []
        for j in range(240):
            value = 96.4 if metric == "cpu_usage" and j == 200 else 35.0 + (j % 5)
            points.append((f"2026-11-29T07:{j % 60:02d}:00Z", value))
        values = [value for _, value in points]
        series.append(MetricSeriesResult(metric=metric, unit="percent", points=points, summary=SeriesSummary(
            count=240, min=min(values), median=sorted(values)[120], max=max(values), max_at=points[values.index(max(values))][0])))
    result = MetricsResult(tool="query_metrics", service="payment-service", start="2026-11-29T07:00:00Z",
                           end="2026-11-29T08:00:00Z", series=series,
                           summary="query_metrics service=payment-service: 3 series, 720 points")
    refs = [EvidenceRef(raw_path=ref.raw_path, text=ref.text, timestamp=ref.timestamp) for ref in rendered_refs(result)]
    return ToolInvocation(
        invocation_id=77, run_id="r", tool_name="query_metrics", lifecycle="READY", evidence_status="EVIDENCE_FOUND",
        agent_result=dump_result(result), retrieval_details=RetrievalDetails(evidence_refs=refs),
    )


def test_large_results_are_bounded_and_keep_the_anomalous_point_and_summaries():
    invocation = _metrics_invocation()
    text = tool_observation(invocation, evidence_bearing=True)
    assert len(text) <= MAX_OBSERVATION_CHARS
    body = json.loads(text)
    assert body["invocation_id"] == 77 and body["evidence_status"] == "EVIDENCE_FOUND"
    shown = {ref["raw_path"]: ref["text"] for ref in body["evidence_refs"]}
    originals = {ref.raw_path: ref.text for ref in evidence_view(invocation).refs()}
    assert all(originals[path] == text for path, text in shown.items())  # exact texts, citable
    assert shown["series[0].points[200]"].startswith("payment-service cpu_usage=96.4%")
    assert {"series[0].summary", "series[1].summary", "series[2].summary"} <= set(shown)
    assert body["refs_shown"].startswith(f"{len(shown)} of 724")


def test_failed_and_helper_results_say_they_are_not_evidence():
    failed = ToolInvocation(invocation_id=5, run_id="r", tool_name="query_logs", lifecycle="ERROR",
                            evidence_status="ERROR", error="query_logs: invalid arguments: end: Field required")
    body = json.loads(tool_observation(failed, evidence_bearing=True))
    assert body["evidence_status"] == "ERROR" and "end: Field required" in body["error"]
    assert "evidence_refs" not in body

    helper = ToolInvocation(invocation_id=6, run_id="r", tool_name="get_current_time", lifecycle="READY",
                            agent_result='{"now": "2026-11-29T11:00:00Z"}')
    body = json.loads(tool_observation(helper, evidence_bearing=False))
    assert "2026-11-29T11:00:00Z" in body["result"] and "not evidence" in body["note"]
    assert "evidence_refs" not in body


def test_user_message_offers_the_plan_as_suggestions():
    plan = Plan(
        services=["payment-service"], window=TimeWindow(start="2026-11-29T10:00:00Z", end="2026-11-29T11:00:00Z"),
        steps=[PlannedToolCall(tool_name="query_metrics", arguments={"service": "payment-service"}, purpose="CPU")],
        missing_context=["time window"],
    )
    text = user_message(plan, "payment-service 的 CPU 告警是真的吗?")
    assert text.startswith("Question: payment-service 的 CPU 告警是真的吗?")
    assert '1. query_metrics {"service": "payment-service"}  (CPU)' in text
    assert "2026-11-29T10:00:00Z .. 2026-11-29T11:00:00Z" in text and "time window" in text
