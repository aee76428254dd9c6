"""No data is not health: the checked scopes without data are read from the stored invocations
(typed results, never text), named in our words, cap the verdict, and turn the first line into
「无法确认：<service> 在 <window> 没有数据（…）」 instead of 「在所查范围内未发现异常」."""

from __future__ import annotations

import pytest

from gateway.answer_guard import OPENING_CONTRADICTED, check_answer
from shared.core.contracts import (
    Claim,
    ClaimCheck,
    ComposerInput,
    EmptyScope,
    EvidenceBinding,
    ExecutorEvidenceV2,
    RecommendedAction,
    SideTextCheck,
    ToolInvocation,
)
from shared.core.direct_answer import FOUND, NOTHING_FOUND, UNKNOWN, first_line, make_finding
from shared.core.question_intent import classify_question
from shared.core.templates import compose_answer, confirmed_anomaly
from shared.core.tool_results import (
    LogHit,
    LogsResult,
    MetricSeriesResult,
    MetricsResult,
    SeriesSummary,
    dump_result,
)
from shared.draft_contract import AnalysisEvidence, Draft, SnapshotEvidence, VerifiedSnapshot
from shared.no_data import cap_for_empty_scopes, empty_scope_phrase, empty_scopes, empty_summary

RUN = "run-1"
START, END = "2026-12-03T12:00:00Z", "2026-12-03T13:00:00Z"
SERVICE = "api-gateway"


def _metrics(invocation_id: int, series: bool = False, metric: str | None = None, service: str = SERVICE,
             **update: object) -> ToolInvocation:
    found = [MetricSeriesResult(metric="http_p99_latency_seconds", unit="s",
                                points=[("2026-12-03T12:01:00Z", 0.2)],
                                summary=SeriesSummary(count=1, min=0.2, median=0.2, max=0.2,
                                                      max_at="2026-12-03T12:01:00Z"))] if series else []
    result = MetricsResult(tool="query_metrics", service=service, metric=metric, start=START, end=END,
                           series=found, summary="query_metrics")
    request = {"tool": "query_metrics", "service": service, "start": START, "end": END}
    if metric:
        request["metric"] = metric
    return ToolInvocation(invocation_id=invocation_id, run_id=RUN, tool_name="query_metrics", lifecycle="READY",
                          evidence_status="EVIDENCE_FOUND" if series else "NO_EVIDENCE", request=request,
                          agent_result=dump_result(result)).model_copy(update=update)


def _logs(invocation_id: int, window_lines: int | None = 0, unclassified: int | None = None,
          hits: list[LogHit] | None = None, service: str = SERVICE, **update: object) -> ToolInvocation:
    listed = hits or []
    result = LogsResult(tool="query_logs", service=service, level=["ERROR", "WARN"], start=START, end=END,
                        total_matches=len(listed), returned=len(listed), hits=listed, summary="query_logs",
                        window_lines=window_lines, unclassified_lines=unclassified)
    return ToolInvocation(invocation_id=invocation_id, run_id=RUN, tool_name="query_logs", lifecycle="READY",
                          evidence_status="EVIDENCE_FOUND" if listed else "NO_EVIDENCE",
                          request={"tool": "query_logs", "service": service, "start": START, "end": END,
                                   "level": ["ERROR", "WARN"]},
                          agent_result=dump_result(result)).model_copy(update=update)


# --- the reader ------------------------------------------------------------------------------------


def test_no_series_and_no_log_line_of_any_level_is_no_data():
    [scope] = empty_scopes([_metrics(1), _logs(2)], RUN)
    assert (scope.service, scope.state, scope.metrics_empty, scope.logs_empty) == (SERVICE, "no_data", True, True)
    assert (scope.start, scope.end, scope.invocation_ids) == (START, END, [1, 2])
    assert empty_scope_phrase(scope) == (
        f"api-gateway 在 {START} 至 {END} 没有数据（指标：没有任何序列；日志：没有任何级别的日志行）")


@pytest.mark.parametrize("rows", [
    pytest.param([_metrics(1), _logs(2, window_lines=None)], id="lines-not-counted-is-unknown"),
    pytest.param([_metrics(1), _logs(2, window_lines=40)], id="lines-of-other-levels"),
    pytest.param([_metrics(1, series=True), _logs(2)], id="a-series-in-the-window"),
    pytest.param([_metrics(1), _logs(2, hits=[LogHit(ts=START, level="ERROR", message="boom")],
                                     window_lines=None)], id="an-error-line"),
    pytest.param([_metrics(1), _logs(2, lifecycle="ERROR", evidence_status="ERROR",
                                     error="query_logs: backend failure: x")], id="failed-logs-only-metrics-left"),
])
def test_data_or_an_unknown_count_is_not_no_data(rows):
    if rows[-1].lifecycle == "ERROR":
        # A failed call is not checked (shared.failed_calls names it); what did complete was empty.
        assert [s.logs_empty for s in empty_scopes(rows, RUN)] == [False]
        return
    assert empty_scopes(rows, RUN) == []


def test_other_runs_abandoned_attempts_and_unreadable_results_count_for_nothing():
    assert empty_scopes([_metrics(1, run_id="other"), _logs(2, run_id="other")], RUN) == []
    assert empty_scopes([_metrics(1, abandoned=True), _logs(2, abandoned=True)], RUN) == []
    assert empty_scopes([_metrics(1), _logs(2, agent_result="{not json")], RUN) == []


def test_a_call_that_named_metrics_says_those_metrics_had_no_data():
    [scope] = empty_scopes([_metrics(1, metric="http_p99_latency_seconds"), _logs(2)], RUN)
    assert not scope.metrics_empty and scope.empty_metrics == ["http_p99_latency_seconds"]
    assert "指标 http_p99_latency_seconds 没有数据" in empty_scope_phrase(scope)
    # With a call over every metric that found some, the service has data.
    assert empty_scopes([_metrics(1, metric="http_p99_latency_seconds"), _metrics(3, series=True), _logs(2)],
                        RUN) == []


def test_each_service_is_read_on_its_own():
    rows = [_metrics(1), _logs(2), _metrics(3, series=True, service="payment-service"),
            _logs(4, window_lines=120, service="payment-service")]
    assert [s.service for s in empty_scopes(rows, RUN)] == [SERVICE]


def test_lines_of_unknown_level_without_a_bad_hit_cannot_be_classified():
    [scope] = empty_scopes([_metrics(1, series=True), _logs(2, window_lines=124, unclassified=124)], RUN)
    assert (scope.state, scope.unclassified_lines, scope.invocation_ids) == ("unclassified", 124, [2])
    assert "124 行日志无法识别级别" in empty_scope_phrase(scope)
    error = LogHit(ts=START, level="ERROR", message="boom")
    assert empty_scopes([_metrics(1, series=True), _logs(2, window_lines=124, unclassified=20, hits=[error])],
                        RUN) == []


def test_a_few_lines_of_unknown_level_among_classified_ones_leave_the_reading_standing():
    # Access lines without a level beside levelled application lines: the logs were classified.
    assert empty_scopes([_metrics(1, series=True), _logs(2, window_lines=1000, unclassified=40)], RUN) == []
    [scope] = empty_scopes([_metrics(1, series=True), _logs(2, window_lines=1000, unclassified=600)], RUN)
    assert scope.state == "unclassified"


def test_the_cap_holds_unless_something_confirmed_abnormal_remains():
    scope = EmptyScope(service=SERVICE, start=START, end=END, metrics_empty=True, logs_empty=True)
    assert cap_for_empty_scopes("PASS", [scope], anomaly_confirmed=False) == "LOW_CONFID"
    assert cap_for_empty_scopes("PASS", [scope], anomaly_confirmed=True) == "PASS"
    assert cap_for_empty_scopes("REJECT", [scope], anomaly_confirmed=False) == "REJECT"
    assert cap_for_empty_scopes("PASS", [], anomaly_confirmed=False) == "PASS"


# --- the first line --------------------------------------------------------------------------------

EMPTY = empty_summary([EmptyScope(service=SERVICE, start=START, end=END, metrics_empty=True, logs_empty=True)])
QUIET = make_finding("api-gateway 在窗口内没有 ERROR/WARN 日志", " [证据: query_logs #2 summary]", "normal", True)
ABNORMAL = make_finding("payment-service 的 http_5xx_rate 升至 12%", " [证据: query_metrics #5 series[0].onset]",
                        "abnormal", True)


@pytest.mark.parametrize(("query", "opening"), [
    ("api-gateway 昨天晚上8点到9点有没有异常？", f"{UNKNOWN}api-gateway 在 {START} 至 {END} 没有数据（"),
    ("api-gateway 为什么报错？", f"原因尚未由证据确认：api-gateway 在 {START} 至 {END} 没有数据（"),
    ("api-gateway 的延迟升高是数据库连接池导致的吗？", f"{UNKNOWN}api-gateway 在 {START} 至 {END} 没有数据（"),
])
def test_the_first_line_says_what_was_empty_instead_of_denying(query, opening):
    line = first_line(classify_question(query), query, [QUIET], "PASS", "api-gateway：日志查询 1 次", empty=EMPTY)
    assert line.startswith(opening), line
    assert NOTHING_FOUND not in line and "证据不支持" not in line


def test_a_confirmed_anomaly_is_still_reported_and_a_failure_is_named_first():
    query = "api-gateway 和 payment-service 有没有异常？"
    line = first_line(classify_question(query), query, [QUIET, ABNORMAL], "PASS", empty=EMPTY)
    assert line.startswith(FOUND), line
    both = first_line(classify_question(query), query, [QUIET], "PASS", failed="日志查询", empty=EMPTY)
    assert both.startswith(f"{UNKNOWN}日志查询失败；api-gateway 在 "), both


# --- the composed answer ---------------------------------------------------------------------------


def _claim() -> Claim:
    return Claim(claim_id="c1", claim_text=f"api-gateway 在 {START} 至 {END} 期间没有 ERROR/WARN 日志（0 matching lines）",
                 claim_type="negative_observation", support_level="direct", evidence_bindings=[EvidenceBinding(
                     tool_name="query_logs", source_invocation_id=2, raw_path="summary",
                     evidence_excerpt="0 matching lines")])


def _composer_input(empty: list[EmptyScope]) -> ComposerInput:
    action = "当前证据未显示异常；如仍有疑虑，请提供告警名称或具体时间点以缩小排查范围。"
    return ComposerInput(
        query="api-gateway 昨天晚上8点到9点有没有异常？", effective_verdict="PASS",
        verified_executor_output=ExecutorEvidenceV2(claims=[_claim()],
                                                    recommended_actions=[RecommendedAction(text=action)]),
        claim_checks=[ClaimCheck(claim_id="c1", claim_text="", claim_type="negative_observation",
                                 verification="direct_observation")],
        side_text_checks=[SideTextCheck(item="recommended_actions[0]", text=action, shown=True)],
        empty_scopes=empty)


def test_the_answer_over_an_empty_scope_is_never_confident_and_names_what_was_empty():
    empty = empty_scopes([_metrics(1), _logs(2)], RUN)
    output = compose_answer(_composer_input(empty))
    first = output.sections["结论"][0]
    assert first.startswith(f"{UNKNOWN}api-gateway 在 {START} 至 {END} 没有数据（指标：没有任何序列；日志：没有任何级别的日志行）")
    assert "可信度：高" not in output.answer and NOTHING_FOUND not in output.answer
    assert "当前证据未显示异常" not in output.answer
    assert any("没有数据不等于正常" in line for line in output.sections["证据缺口"])
    assert output.structured_answer is not None and output.structured_answer.direct_answer == first


def test_with_data_the_quiet_answer_stands():
    output = compose_answer(_composer_input([]))
    assert output.sections["结论"][0].startswith(NOTHING_FOUND)
    assert output.answer.startswith("可信度：高")


def test_insufficient_evidence_names_what_was_empty():
    empty = empty_scopes([_metrics(1), _logs(2)], RUN)
    output = compose_answer(ComposerInput(query="", fallback_type="INSUFFICIENT_EVIDENCE", empty_scopes=empty))
    assert output.sections["说明"][0].startswith(f"{UNKNOWN}api-gateway 在 {START} 至 {END} 没有数据（")
    plain = compose_answer(ComposerInput(query="", fallback_type="INSUFFICIENT_EVIDENCE"))
    assert plain.sections["说明"][0] == "本次查询没有获得足以支持结论的证据。"


def test_the_gateway_reads_a_confirmed_anomaly_from_the_checked_claims():
    claim = _claim()
    check = ClaimCheck(claim_id="c1", claim_text="", claim_type="negative_observation",
                       verification="direct_observation")
    assert not confirmed_anomaly([claim], [check], "PASS")
    rise = claim.model_copy(update={"claim_type": "observation",
                                    "claim_text": "payment-service 的 http_5xx_rate 升至 12%"})
    assert confirmed_anomaly([rise], [check.model_copy(update={"claim_type": "observation"})], "PASS")


# --- single-ReAct: the answer guard ----------------------------------------------------------------


def _draft(conclusion: str) -> Draft:
    return Draft.model_validate({
        "conclusion": {"text": conclusion, "analysis_refs": ["a1"]},
        "analyses": [{"analysis_id": "a1", "kind": "NEGATIVE_OBSERVATION", "text": "没有匹配的日志",
                      "tool_call_ids": ["t2"]}],
    })


def _snapshot(status: str) -> VerifiedSnapshot:
    return VerifiedSnapshot(analyses=[AnalysisEvidence(analysis_id="a1", evidence=[
        SnapshotEvidence(tool_name="query_logs", evidence_status=status)])])


@pytest.mark.parametrize("conclusion", [f"{NOTHING_FOUND}（api-gateway）", "api-gateway 的内存一切正常。"])
def test_a_draft_concluding_health_over_an_empty_scope_or_from_nothing_found_is_unsupported(conclusion):
    query = "api-gateway 昨天晚上8点到9点有没有异常？" if conclusion.startswith(NOTHING_FOUND) else "api-gateway 的内存呢？"
    empty = empty_scopes([_metrics(1), _logs(2)], RUN)
    found = check_answer(classify_question(query), _draft(conclusion), _snapshot("EVIDENCE_FOUND"), [], empty)
    assert [f.check_id for f in found] == [OPENING_CONTRADICTED] and "api-gateway" in found[0].detail
    alone = check_answer(classify_question(query), _draft(conclusion), _snapshot("NO_EVIDENCE"), [], [])
    assert [f.check_id for f in alone] == [OPENING_CONTRADICTED]
    assert "found nothing" in alone[0].detail


def test_a_draft_that_says_it_cannot_tell_is_not_held_back():
    empty = empty_scopes([_metrics(1), _logs(2)], RUN)
    draft = _draft(f"{UNKNOWN}api-gateway 在 {START} 至 {END} 没有数据，不能据此判断所查范围内是否有异常")
    assert check_answer(classify_question("api-gateway 昨天晚上8点到9点有没有异常？"), draft, _snapshot("NO_EVIDENCE"), [], empty) == []


def test_the_embedded_single_react_draft_concludes_nothing_over_an_empty_scope():
    from services.executor.embedded_draft import draft_from_evidence

    query = "api-gateway 昨天晚上8点到9点有没有异常？"
    empty = [_metrics(1, tool_call_id="t1"), _logs(2, tool_call_id="t2")]
    draft = draft_from_evidence(ExecutorEvidenceV2(), empty, query, classify_question(query))
    # The checks are still shown; the gateway's INSUFFICIENT_EVIDENCE names what was empty.
    assert draft.conclusion is None and draft.analyses
