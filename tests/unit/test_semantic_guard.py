"""SemanticGuard: the embedded review, the isolated review input, the strict verdict parser, and the
model guard's limits and budgets (single-react-evidence-semantic-guards: "Isolated single-turn
SemanticGuard", "Semantic model budgets timeout cancellation and retry").

The model guard runs here against an in-process fake client (each case is about the guard's own
rules); tests/grpc/test_verifier_openai.py drives it over real HTTP through the gRPC servicer.
"""

from __future__ import annotations

import json

import pytest

from services.verifier.prompts import SEMANTIC_GUARD_PROMPT, load_prompt
from services.verifier.semantic_guard import (
    EmbeddedSemanticGuard,
    ModelSemanticGuard,
    SemanticProtocolError,
    parse_semantic_verdict,
    review_input_bytes,
)
from services.verifier.semantic_guard_settings import SemanticGuardSettings
from shared.core.contracts import RefFacts, StatedValue, TokenUsage
from shared.draft_contract import (
    ActionPlanItem,
    Analysis,
    AnalysisEvidence,
    Conclusion,
    Draft,
    Recommendation,
    SnapshotEvidence,
    VerifiedSnapshot,
)
from shared.model_client import ModelReply, ModelRequestError, ModelTransportError

QUERY = "为什么 payment-service 的 CPU 这么高?"
SCOPE = "end=2026-11-29T11:00:00Z service=payment-service start=2026-11-29T10:00:00Z"
WINDOW = {"window_start": "2026-11-29T10:00:00Z", "window_end": "2026-11-29T11:00:00Z"}
# What the gatekeeper reads from the stored tool results for each ref shown (shared.core.evidence_facts).
METRICS = SnapshotEvidence(
    tool_name="query_metrics", source="sql:estate", scope=f"{SCOPE} metric=cpu_usage", timestamp="2026-11-29T10:35:00Z",
    excerpt="query_metrics service=payment-service metric=cpu_usage: 1 series, 3 points\n"
            "payment-service cpu_usage=92.0% at 2026-11-29T10:35:00Z",
    evidence_status="EVIDENCE_FOUND",
    facts=[
        RefFacts(kind="metric_scope", subject="payment-service", metric="cpu_usage", filter="cpu_usage", item_count=3,
                 **WINDOW),
        RefFacts(kind="metric_point", subject="payment-service", metric="cpu_usage", at="2026-11-29T10:35:00Z",
                 values=[StatedValue(name="value", value=92.0, unit="%", at="2026-11-29T10:35:00Z")]),
    ],
)
LOGS = SnapshotEvidence(
    tool_name="query_logs", source="sql:estate", scope=f"{SCOPE} level=ERROR", timestamp="2026-11-29T10:36:02Z",
    excerpt="query_logs service=payment-service level=ERROR: 1 matching lines\n"
            "2026-11-29T10:36:02Z ERROR payment-service host=node-1 upstream timeout calling db-primary after 3000ms",
    evidence_status="EVIDENCE_FOUND",
    facts=[
        RefFacts(kind="log_scope", subject="payment-service", level="ERROR", item_count=1, **WINDOW),
        RefFacts(kind="log_line", subject="payment-service", at="2026-11-29T10:36:02Z", level="ERROR"),
    ],
)
NO_OOM = SnapshotEvidence(
    tool_name="query_logs", source="sql:estate", scope=f"{SCOPE} contains=OOMKilled",
    excerpt="query_logs service=payment-service contains=OOMKilled: 0 matching lines",
    evidence_status="NO_EVIDENCE",
    facts=[RefFacts(kind="log_scope", subject="payment-service", filter="OOMKilled", item_count=0, empty=True, **WINDOW)],
)
RUNBOOK = SnapshotEvidence(
    tool_name="lookup_knowledge", source="runbook:payment", excerpt="历史事故：db-primary 超时导致 payment-service CPU 升高",
    evidence_status="EVIDENCE_FOUND",
)


def snapshot(**groups: list[SnapshotEvidence]) -> VerifiedSnapshot:
    default = {"a1": [METRICS], "a2": [LOGS], "a3": [NO_OOM]}
    default.update(groups)
    return VerifiedSnapshot(analyses=[AnalysisEvidence(analysis_id=k, evidence=v) for k, v in default.items() if v])


def draft(conclusion: str = "payment-service 在 10:35 CPU 使用率达到 92%，同时出现调用 db-primary 的 upstream timeout。",
          refs=("a1", "a2"), a1: str = "payment-service 的 cpu_usage 在 10:35 达到 92%。",
          a2: str = "payment-service 日志出现调用 db-primary 的 upstream timeout（3000ms）。",
          a3: str = "查询窗口内未发现 payment-service 的 OOMKilled 日志。",
          recommendations=("检查 db-primary 的慢查询与连接数",), action_plan=()) -> Draft:
    return Draft(
        conclusion=Conclusion(text=conclusion, analysis_refs=list(refs)),
        analyses=[
            Analysis(analysis_id="a1", kind="NORMAL", text=a1, tool_call_ids=["call-cpu"]),
            Analysis(analysis_id="a2", kind="NORMAL", text=a2, tool_call_ids=["call-logs"]),
            Analysis(analysis_id="a3", kind="NEGATIVE_OBSERVATION", text=a3, tool_call_ids=["call-oom"]),
        ],
        recommendations=[Recommendation(text=t, analysis_refs=["a2"]) for t in recommendations],
        action_plan=[ActionPlanItem(text=t, analysis_refs=["a2"], requires_human_confirmation=True) for t in action_plan],
        limitations=["只查看了最近一小时"],
    )


def review(d: Draft, snap: VerifiedSnapshot | None = None):
    run = EmbeddedSemanticGuard().review(QUERY, d, snap or snapshot())
    assert run.review is not None and run.audit.attempts == 1 and run.audit.provider == "embedded"
    assert run.review.reason.strip()
    return run.review


# --- the embedded guard ---------------------------------------------------------------------------


def test_a_draft_stating_only_what_its_evidence_shows_is_supported():
    assert review(draft()).verdict == "SUPPORTED"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"a1": "payment-service 的 cpu_usage 在 10:35 达到 95%。"}, "95%"),  # number differs
        ({"conclusion": "order-service 在 10:35 CPU 使用率达到 92%。"}, "order-service"),  # service absent
        ({"a2": "payment-service 返回 HTTP 502，调用 db-primary 超时。"}, "502"),  # error code absent
        ({"a2": "payment-service 日志出现 NullPointerException。"}, "nullpointerexception"),
        ({"a1": "payment-service 的内存使用率在 10:35 达到 92%。"}, "memory"),  # metric family absent
        ({"conclusion": "payment-service 运行正常，调用 db-primary 没有出现 timeout。", "refs": ("a2",)}, "normal"),
    ],
)
def test_a_value_name_or_code_the_evidence_lacks_is_unsupported(change, named):
    verdict = review(draft(**change))
    assert verdict.verdict == "UNSUPPORTED"
    assert named in verdict.reason.casefold()


def test_the_conclusion_is_judged_only_by_the_analyses_it_references():
    # db-primary is in a2's evidence, not in a1's: a conclusion resting on a1 alone may not name it.
    verdict = review(draft(conclusion="payment-service 调用 db-primary 时 CPU 达到 92%。", refs=("a1",)))
    assert verdict.verdict == "UNSUPPORTED" and "db-primary" in verdict.reason


def test_a_cause_the_evidence_does_not_state_is_unsupported():
    verdict = review(draft(conclusion="payment-service 的 upstream timeout 导致 CPU 使用率达到 92%。"))
    assert verdict.verdict == "UNSUPPORTED" and "cause" in verdict.reason


def test_a_cause_marked_as_a_possibility_is_not_asserted():
    assert review(draft(conclusion="payment-service 的 upstream timeout 可能导致 CPU 使用率达到 92%。")).verdict == "SUPPORTED"


def test_a_cause_stated_by_the_incident_evidence_is_supported():
    logs = LOGS.model_copy(update={"excerpt": LOGS.excerpt + " caused by db-primary connection refused"})
    d = draft(conclusion="payment-service 的 upstream timeout 是由于 db-primary connection refused。", refs=("a2",))
    assert review(d, snapshot(a2=[logs])).verdict == "SUPPORTED"


def test_a_runbook_never_states_the_current_incidents_cause():
    d = draft(conclusion="db-primary 超时导致 payment-service CPU 升高到 92%。", refs=("a1", "a2"))
    verdict = review(d, snapshot(a2=[LOGS, RUNBOOK]))
    assert verdict.verdict == "UNSUPPORTED"


def test_a_search_that_found_nothing_is_not_read_as_health():
    verdict = review(draft(a3="未发现 payment-service 的 OOMKilled 日志，说明 payment-service 运行正常。"))
    assert verdict.verdict == "UNSUPPORTED" and "health" in verdict.reason


def test_a_negative_observation_cannot_report_a_finding():
    verdict = review(draft(a3="payment-service 出现 OOMKilled 日志。"))
    assert verdict.verdict == "UNSUPPORTED"


def test_an_analysis_without_verified_evidence_is_unsupported():
    verdict = review(draft(), snapshot(a2=[]))
    assert verdict.verdict == "UNSUPPORTED" and "analysis a2 has no verified evidence" in verdict.reason


def test_advice_may_not_name_what_the_evidence_lacks():
    verdict = review(draft(recommendations=("重启 order-service",)))
    assert verdict.verdict == "UNSUPPORTED" and "order-service" in verdict.reason
    assert review(draft(action_plan=("将 db-primary 的连接池上限调到 200",))).verdict == "SUPPORTED"  # advice's own number


def test_a_draft_without_a_conclusion_is_not_supported():
    d = draft().model_copy(update={"conclusion": None})
    assert review(d).verdict == "UNSUPPORTED"


def test_same_draft_same_review():
    assert review(draft(a1="CPU 95%")) == review(draft(a1="CPU 95%"))


# --- the review input -------------------------------------------------------------------------------


def test_semantic_input_isolation():
    payload = review_input_bytes(QUERY, draft(), snapshot())
    data = json.loads(payload)
    assert set(data) == {"query", "draft", "verified_evidence"}
    assert data["query"] == QUERY
    assert {"conclusion", "analyses", "action_plan", "recommendations", "limitations", "missing_context"} == set(data["draft"])
    text = payload.decode("utf-8")
    assert "tool_call_id" not in text and "call-cpu" not in text and "call-logs" not in text
    assert METRICS.excerpt in data["verified_evidence"]["analyses"][0]["evidence"][0]["excerpt"]
    assert payload == review_input_bytes(QUERY, draft().model_copy(deep=True), snapshot())  # canonical


# --- the strict verdict parser ----------------------------------------------------------------------


def test_binary_review_output():
    assert parse_semantic_verdict('{"verdict": "SUPPORTED", "reason": "all values occur"}', 4096).verdict == "SUPPORTED"
    assert parse_semantic_verdict(' {"reason": "95% not shown", "verdict": "UNSUPPORTED"}\n', 4096).reason == "95% not shown"


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"verdict": "SUPPORTED", "reason": "ok"}\n```',
        'Verdict: {"verdict": "SUPPORTED", "reason": "ok"}',
        '{"verdict": "SUPPORTED"}',
        '{"verdict": "SUPPORTED", "reason": "   "}',
        '{"verdict": "PASS", "reason": "ok"}',
        '{"verdict": "SUPPORTED", "reason": "ok", "corrected_report": {"conclusion": "x"}}',
        '{"verdict": "SUPPORTED", "reason": "ok"} {"verdict": "UNSUPPORTED", "reason": "no"}',
        '{"verdict": "SUPPORTED", "reason": "' + "x" * 5000 + '"}',
    ],
)
def test_anything_but_the_strict_verdict_object_is_a_schema_failure(text):
    with pytest.raises(SemanticProtocolError):
        parse_semantic_verdict(text, 4096)


# --- the model guard's limits, with an in-process client --------------------------------------------


class FakeClient:
    provider = "openai"
    model = "fake-model"
    timeout_seconds = 60.0

    def __init__(self, *replies):
        self.replies = list(replies)
        self.calls: list[dict] = []

    def complete(self, messages, *, tools=None, response_format=None, timeout=None):
        self.calls.append({"messages": messages, "response_format": response_format, "timeout": timeout, "tools": tools})
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def reply(content: str, tokens: int = 10) -> ModelReply:
    return ModelReply(content=content, usage=TokenUsage(prompt_tokens=tokens, completion_tokens=0, total_tokens=tokens))


SUPPORTED = '{"verdict": "SUPPORTED", "reason": "every value occurs in its evidence"}'
UNSUPPORTED = '{"verdict": "UNSUPPORTED", "reason": "95% is not in the evidence of a1"}'


def guard(client, **limits):
    return ModelSemanticGuard(client, load_prompt(SEMANTIC_GUARD_PROMPT), SemanticGuardSettings(**limits))


def test_the_guard_call_is_single_turn_without_tools():
    client = FakeClient(reply(SUPPORTED))
    run = guard(client).review(QUERY, draft(), snapshot())
    assert run.review.verdict == "SUPPORTED" and run.audit.attempts == 1
    [call] = client.calls
    assert call["tools"] is None
    assert [m["role"] for m in call["messages"]] == ["system", "user"]
    assert call["messages"][1]["content"].encode("utf-8") == review_input_bytes(QUERY, draft(), snapshot())
    assert call["response_format"] == {"type": "json_object"}
    assert (run.audit.prompt.role, run.audit.prompt.name, run.audit.prompt.version) == ("semantic_guard", "semantic_guard", "1")


def test_technical_failure_then_success_uses_the_same_input():
    client = FakeClient(ModelTransportError("HTTP 503"), reply("not json"), reply(SUPPORTED))
    run = guard(client, max_attempts=2, run_max_model_calls=2).review(QUERY, draft(), snapshot())
    assert run.review is None and run.audit.attempts == 2  # transport, then parse: both attempts spent
    assert "attempt 1" in run.failure and "attempt 2" in run.failure
    assert client.calls[0]["messages"] is client.calls[1]["messages"]


def test_unsupported_is_not_retried():
    client = FakeClient(reply(UNSUPPORTED), reply(SUPPORTED))
    run = guard(client).review(QUERY, draft(), snapshot())
    assert run.review.verdict == "UNSUPPORTED" and run.audit.attempts == 1 and len(client.calls) == 1


def test_a_refused_request_is_not_retried():
    client = FakeClient(ModelRequestError("HTTP 400"), reply(SUPPORTED))
    run = guard(client).review(QUERY, draft(), snapshot())
    assert run.review is None and run.audit.attempts == 1 and "ModelRequestError" in run.failure


def test_an_input_over_the_byte_limit_is_never_sent():
    client = FakeClient(reply(SUPPORTED))
    run = guard(client, max_input_bytes=200).review(QUERY, draft(), snapshot())
    assert run.review is None and run.audit.attempts == 0 and client.calls == []
    assert "200-byte limit" in run.failure


def test_a_reply_over_the_output_limit_is_a_schema_failure():
    big = json.dumps({"verdict": "SUPPORTED", "reason": "x" * 300})
    client = FakeClient(reply(big), reply(SUPPORTED))
    run = guard(client, max_output_bytes=200).review(QUERY, draft(), snapshot())
    assert run.review.verdict == "SUPPORTED" and run.audit.attempts == 2


@pytest.mark.parametrize(
    ("limits", "why"),
    [
        ({"run_max_model_calls": 1}, "model call budget"),
        ({"run_max_tokens": 50}, "token budget"),
        ({"run_max_bytes": 1}, "byte budget"),
    ],
)
def test_run_budgets_stop_further_attempts(limits, why):
    client = FakeClient(reply("not json", tokens=60), reply(SUPPORTED))
    run = guard(client, **limits).review(QUERY, draft(), snapshot())
    assert run.review is None and why in run.failure
    assert len(client.calls) <= 1


def test_attempt_timeouts_are_bounded_by_the_callers_deadline():
    client = FakeClient(reply(SUPPORTED))
    guard(client, attempt_timeout_seconds=30, total_timeout_seconds=60).review(
        QUERY, draft(), snapshot(), time_remaining=lambda: 4.0
    )
    assert client.calls[0]["timeout"] == pytest.approx(4.0)


def test_no_time_left_is_a_technical_failure_without_a_call():
    client = FakeClient(reply(SUPPORTED))
    run = guard(client).review(QUERY, draft(), snapshot(), time_remaining=lambda: 0.05)
    assert run.review is None and client.calls == [] and "no time left" in run.failure
