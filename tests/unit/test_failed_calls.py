"""A failed evidence call is a critical gap that triggers the one retry, caps
the verdict at LOW_CONFID while no later round recovered it, is named in the answer in our words
and never lets a line deny an anomaly."""

from __future__ import annotations

import pytest

from gateway.answer_guard import OPENING_CONTRADICTED, check_answer
from shared.core.contracts import (
    Claim,
    ClaimCheck,
    ComposerInput,
    EvidenceBinding,
    ExecutorEvidenceV2,
    FailedCall,
    ToolInvocation,
)
from shared.core.effective_verdict import (
    FAILED_CALL_GAP_PREFIX,
    build_retry_context,
    cap_for_failed_calls,
    should_retry_evidence,
)
from shared.core.question_intent import classify_question
from shared.core.templates import FAILED_SECTION, compose_answer
from shared.draft_contract import Draft, VerifiedSnapshot
from shared.failed_calls import (
    error_class,
    failed_call_line,
    failed_calls,
    open_failures,
)

RUN = "run-1"
REFUSED = ("query_logs: backend failure: BackendError: loki query_range: request failed: ConnectError: "
           "[Errno 111] Connection refused")


def _invocation(invocation_id: int, tool: str = "query_logs", round_: int = 0, error: str = REFUSED,
                service: str = "payment-service", ok: bool = False) -> ToolInvocation:
    return ToolInvocation(
        invocation_id=invocation_id, run_id=RUN, tool_name=tool, round=round_,
        lifecycle="READY" if ok else "ERROR", evidence_status="EVIDENCE_FOUND" if ok else "ERROR",
        request={"service": service, "level": ["ERROR", "WARN"], "start": "2026-11-30T10:00:00Z",
                 "end": "2026-11-30T11:00:00Z"},
        error="" if ok else error,
    )


def _failed(recovered: bool = False, tool: str = "query_logs") -> FailedCall:
    return FailedCall(tool_name=tool, invocation_id=7, service="payment-service", error_class="unreachable",
                      scope="服务 payment-service，全部级别", recovered=recovered)


@pytest.mark.parametrize(("error", "expected"), [
    (REFUSED, ("unreachable", 0)),
    ("query_metrics: backend failure: BackendError: prometheus query_range: no response within 5s", ("timeout", 0)),
    ("query_metrics: backend failure: BackendError: prometheus query_range: HTTP 503: Service Unavailable",
     ("http_error", 503)),
    (("query_metrics: backend failure: BackendError: prometheus query_range: unexpected response (not a success "
      "JSON object with data)"), ("not_backend_response", 0)),
    ("query_logs: backend failure: RuntimeError: boom", ("failed", 0)),
])
def test_the_stored_error_is_read_into_our_classes(error, expected):
    assert error_class(error) == expected


def test_failed_calls_are_backend_failures_of_the_run_and_a_later_success_recovers_them():
    rows = [
        _invocation(1),
        _invocation(2, tool="query_metrics", ok=True),
        _invocation(3, error="query_logs: invalid arguments: level: unknown level 'X'"),  # refused arguments
        _invocation(4, round_=1, ok=True),
        _invocation(5, tool="query_metrics", round_=1, error="query_metrics: backend failure: BackendError: x: HTTP 500: oops"),
        _invocation(6).model_copy(update={"run_id": "another-run"}),
    ]
    calls = failed_calls(rows, RUN)
    assert [(c.invocation_id, c.error_class, c.http_status, c.recovered) for c in calls] == [
        (1, "unreachable", 0, True), (5, "http_error", 500, False)]
    assert [c.invocation_id for c in open_failures(calls)] == [5]
    assert calls[0].scope.startswith("服务 payment-service，级别 ERROR/WARN")


def test_the_line_names_the_query_in_our_words_never_the_stored_text():
    line = failed_call_line(failed_calls([_invocation(3)], RUN)[0])
    assert line.startswith("日志查询失败：服务 payment-service") and "无法连接后端" in line and "#3" in line
    assert "Connect" not in line and "refused" not in line
    http = FailedCall(tool_name="query_metrics", invocation_id=9, error_class="http_error", http_status=502)
    assert failed_call_line(http) == "指标查询失败（后端返回 HTTP 502，调用 #9）"


def test_a_failed_call_caps_the_verdict_at_low_confid_until_recovered():
    assert cap_for_failed_calls("PASS", [_failed()]) == "LOW_CONFID"
    assert cap_for_failed_calls("REJECT", [_failed()]) == "REJECT"
    assert cap_for_failed_calls("PASS", [_failed(recovered=True)]) == "PASS"
    assert cap_for_failed_calls("PASS", []) == "PASS"


def _claim() -> Claim:
    return Claim(claim_id="c1", claim_text="payment-service 的 http_5xx_rate 达到 2.4%", claim_type="observation",
                 support_level="direct", evidence_bindings=[EvidenceBinding(
                     tool_name="query_metrics", source_invocation_id=2, evidence_excerpt="http_5xx_rate=2.4")])


def _confirmed() -> ClaimCheck:
    return ClaimCheck(claim_id="c1", claim_text="", claim_type="observation", verification="direct_observation")


def test_a_failed_call_is_a_critical_gap_that_triggers_the_one_retry_without_lowering_the_ceiling():
    claims, checks = [_claim()], [_confirmed()]
    # No claim gap: PASS would not retry; with a failed call it does, once, and only under ceiling PASS.
    assert not should_retry_evidence("PASS", "PASS", claims, checks, 0)
    assert should_retry_evidence("PASS", "PASS", claims, checks, 0, [_failed()])
    assert should_retry_evidence("LOW_CONFID", "PASS", claims, checks, 0, [_failed()])
    assert not should_retry_evidence("PASS", "PASS", claims, checks, 1, [_failed()]), "one retry only"
    assert not should_retry_evidence("PASS", "LOW_CONFID", claims, checks, 0, [_failed()])
    assert not should_retry_evidence("REJECT", "PASS", claims, checks, 0, [_failed()])
    assert not should_retry_evidence("PASS", "PASS", claims, checks, 0, [_failed(recovered=True)])

    context = build_retry_context(claims, checks, ["payment-service"], failed_calls=[_failed(), _failed()])
    assert [(g.claim_id, g.verification, g.services, g.tool_names) for g in context.gaps] == [
        (f"{FAILED_CALL_GAP_PREFIX}7", "external_unknown", ["payment-service"], ["query_logs"])]


def _composer_input(verdict: str, query: str, failed: list[FailedCall]) -> ComposerInput:
    quiet = Claim(claim_id="c1", claim_text="payment-service 的 http_5xx_rate 最高为 0.1%，未见明显升高",
                  claim_type="observation", support_level="direct", evidence_bindings=[EvidenceBinding(
                      tool_name="query_metrics", source_invocation_id=2, raw_path="series[0].summary",
                      evidence_excerpt="http_5xx_rate max 0.1")])
    return ComposerInput(query=query, effective_verdict=verdict,
                         verified_executor_output=ExecutorEvidenceV2(claims=[quiet]),
                         claim_checks=[_confirmed()], failed_calls=failed)


@pytest.mark.parametrize("verdict", ["PASS", "LOW_CONFID", "REJECT"])
@pytest.mark.parametrize("query", ["payment-service 正常吗？", "payment-service 为什么报错？",
                                   "payment-service 的错误率上升了吗？"])
def test_every_layout_names_the_failed_call_and_denies_nothing(verdict, query):
    output = compose_answer(_composer_input(verdict, query, [_failed()]))
    assert f"【{FAILED_SECTION}】\n- 日志查询失败：服务 payment-service" in output.answer, output.answer
    assert not any(word in output.answer for word in ("未发现异常", "未显示异常", "证据不支持")), output.answer
    assert "可信度：高" not in output.answer
    first = output.sections["结论"][0]
    assert "日志查询失败" in first, first


def test_without_a_failure_the_quiet_answer_stands():
    output = compose_answer(_composer_input("PASS", "payment-service 正常吗？", []))
    assert output.sections["结论"][0].startswith("在所查范围内未发现异常")
    assert FAILED_SECTION not in output.sections


def test_a_fallback_names_the_failed_call_too():
    output = compose_answer(ComposerInput(query="payment-service 正常吗？", fallback_type="PRE_VERIFICATION",
                                          fallback_cause="NO_VERIFIED_CLAIM", failed_calls=[_failed()]))
    assert "日志查询失败：服务 payment-service" in output.answer


def test_the_answer_guard_keeps_a_denying_draft_from_release_while_a_call_failed():
    draft = Draft.model_validate({
        "conclusion": {"text": "在所查范围内未发现异常（payment-service）", "analysis_refs": ["a1"]},
        "analyses": [{"analysis_id": "a1", "kind": "NEGATIVE_OBSERVATION", "text": "没有匹配的日志",
                      "evidence_refs": []}],
    })
    findings = check_answer(classify_question("payment-service 正常吗？"), draft, VerifiedSnapshot(), [_failed()])
    assert [f.check_id for f in findings] == [OPENING_CONTRADICTED]
    assert "query_logs #7" in findings[0].detail
    recommendation = Draft.model_validate({
        **draft.model_dump(mode="json"),
        "conclusion": {"text": "无法确认：日志查询失败", "analysis_refs": ["a1"]},
        "recommendations": [{"text": "当前证据未显示异常；请稍后重试"}]})
    assert [f.check_id for f in check_answer(classify_question("payment-service 正常吗？"), recommendation, VerifiedSnapshot(),
                                             [_failed()])] == [OPENING_CONTRADICTED]
    assert check_answer(classify_question("payment-service 正常吗？"), recommendation, VerifiedSnapshot(),
                        [_failed(recovered=True)]) == []
