"""Single-ReAct mode end to end: every Release outcome and fallback type, through six processes.

The embedded engines give the honest paths (SUCCESS, INSUFFICIENT_EVIDENCE, MISSING_REQUIRED_CONTEXT).
Paths that need a misbehaving model use scripted OpenAI-compatible servers (real HTTP, the real
`openai` client) for the executor's agent and the verifier's SemanticGuard — the one boundary
replaced here; tools, EvidenceGuard, repair and release are the real ones.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import answer_pb2, gateway_pb2, gateway_pb2_grpc
from shared.db.engine import make_engine, make_session_factory
from shared.db.run_store import RunStore
from shared.proto_convert import enum_number, spec_value
from tests.integration.answer_structure_checks import run_invocations, sections_of, structure_problems
from tests.integration.conftest import start_cluster
from tests.scripted_model_server import ScriptedModelServer, Status, completion, tool_call

pytestmark = pytest.mark.integration
SINGLE_REACT = enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, "SINGLE_REACT")


def _diagnose(addr: str, database_url: str, query: str, auth_metadata):
    with grpc.insecure_channel(addr) as channel:
        response = gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(
            gateway_pb2.DiagnoseRequest(query=query, mode=SINGLE_REACT), timeout=90, metadata=auth_metadata)
    run = RunStore(make_session_factory(make_engine(database_url))).get_run(response.run_id)
    return response, run


def _release(response) -> tuple[str | None, str | None]:
    return (spec_value(enums_pb2.ReleaseOutcome.DESCRIPTOR, response.release_outcome),
            spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type))


# --- the embedded engines ---------------------------------------------------------------------------


def test_supported_draft_is_released_unchanged(cluster, auth_metadata):
    response, run = _diagnose(cluster.gateway_addr, cluster.database_url,
                              "为什么 payment-service 的 CPU 这么高？", auth_metadata)
    assert _release(response) == ("SUCCESS", None), [(e["item"], e["detail"]) for e in run["self_evaluation"]["verifier_evaluation"]["rejection_ledger"]]
    assert "【结论】" in response.answer and "【分析】" in response.answer
    react = run["self_evaluation"]["verifier_evaluation"]["single_react"]
    assert react["guard"]["passed"] and react["semantic_guard"]["verdict"] == "SUPPORTED"
    assert run["status"] == "COMPLETED"
    # A released Draft is PASS, and arrives as a structure citing what EvidenceGuard verified.
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict) == "PASS"
    assert (response.outcome_status, response.retryable) == (answer_pb2.OUTCOME_STATUS_COMPLETED, False)
    assert structure_problems(response, run_invocations(cluster.database_url, response.run_id)) == []
    assert sections_of(response)[:2] == ["CONFIDENCE", "CONCLUSION"]
    analyses = next(s for s in response.structured_answer.sections if s.title == "分析")
    assert all(i.citations and i.basis == answer_pb2.ITEM_BASIS_GUARDED_DRAFT for i in analyses.items)
    assert response.structured_answer.direct_answer in response.answer


def test_missing_context_ends_without_tool_calls_or_guard_model(cluster, auth_metadata):
    response, run = _diagnose(cluster.gateway_addr, cluster.database_url, "系统是不是有点慢？", auth_metadata)
    assert _release(response) == ("FALLBACK", "MISSING_REQUIRED_CONTEXT")
    assert response.effective_verdict == enums_pb2.VERDICT_UNSPECIFIED  # a fallback invents no verdict
    assert (response.outcome_status, response.retryable) == (answer_pb2.OUTCOME_STATUS_FALLBACK, False)
    assert structure_problems(response, []) == [] and sections_of(response)[0] == "EXPLANATION"
    assert run["invocations"] == []
    assert "verifier" not in {event["node"] for event in run["events"]}


def test_a_healthy_service_is_an_answer(cluster, auth_metadata):
    """This used to be INSUFFICIENT_EVIDENCE (a conclusion existed only for an
    anomaly). Nothing abnormal in the checked scope is an answer: SUCCESS, the conclusion's first
    line 「在所查范围内未发现异常（scope）」, every check an analysis."""
    response, run = _diagnose(cluster.gateway_addr, cluster.database_url,
                              "user-service 最近一小时正常吗？", auth_metadata)
    assert _release(response) == ("SUCCESS", None), run["self_evaluation"]["verifier_evaluation"]["rejection_ledger"]
    lines = [line for line in response.answer.splitlines() if line.strip()]
    first = lines[lines.index("【结论】") + 1]
    assert first.startswith("在所查范围内未发现异常（user-service：") and "ERROR/WARN 日志" in first
    assert "健康" not in first and "排除" not in first
    assert "未见明显升高" in response.answer and "【行动计划】" not in response.answer
    react = run["self_evaluation"]["verifier_evaluation"]["single_react"]
    assert react["answer_guard"] == {"passed": True, "checks": []}
    assert react["semantic_guard"]["verdict"] == "SUPPORTED"


# --- scripted models ------------------------------------------------------------------------------


class ScriptedAgent:
    """The executor's agent: one query_logs step, its progress record, then `final` (a callable)."""

    def __init__(self) -> None:
        self.final = None
        self.break_protocol = False
        self.outage = False

    def __call__(self, body: dict):
        if self.outage:  # the model refuses every request: the agent stops before any check
            return Status(400, {"error": {"message": "scripted outage", "type": "invalid_request_error"}})
        if not body.get("tools"):  # the single-turn, no-tool EvidenceRepair: the Draft, unchanged
            return completion(self.final())
        observed = [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]
        calls = [o for o in observed if "invocation_id" in o]
        if not calls:
            end = datetime.now(UTC).replace(microsecond=0)
            arguments = {"service": "payment-service", "level": "ERROR", "limit": 20,
                         "start": (end - timedelta(hours=1)).isoformat().replace("+00:00", "Z"),
                         "end": end.isoformat().replace("+00:00", "Z")}
            return completion(tool_calls=[tool_call("query_logs", arguments, "call_logs")])
        recorded = any(o.get("status") == "RECORDED" for o in observed)
        if not recorded:
            record = {"step": calls[-1]["step"], "tool_call_ids": [c["tool_call_id"] for c in calls],
                      "observation_summary": "查询到 ERROR 日志", "status": "EVIDENCE_FOUND"}
            if self.break_protocol:
                record["tool_call_ids"] = ["call_that_never_happened"]
            return completion(tool_calls=[tool_call("record_progress", record)])
        return completion(self.final())


def _draft(conclusion: str, tool_call_id: str = "call_logs") -> str:
    return json.dumps({
        # 「原因尚未由证据确认；…」: the direct answer to the scripted why-questions.
        "conclusion": {"text": f"原因尚未由证据确认；最明显的线索：{conclusion}", "analysis_refs": ["a1"]},
        "analyses": [{"analysis_id": "a1", "kind": "NORMAL", "text": "payment-service 在查询窗口内有 ERROR 日志。",
                      "tool_call_ids": [tool_call_id]}],
        "action_plan": [{"text": "检查报错接口的调用链。", "analysis_refs": ["a1"], "requires_human_confirmation": False}],
        "recommendations": [], "limitations": ["根因尚未确认。"], "missing_context": [],
    }, ensure_ascii=False)


@pytest.fixture(scope="module")
def scripted(tmp_path_factory, otlp_receiver, new_database):
    agent = ScriptedAgent()
    with ScriptedModelServer([agent], repeat_last=True) as executor_model, ScriptedModelServer() as verifier_model:
        root = tmp_path_factory.mktemp("react")
        running = start_cluster(root, otlp_receiver.endpoint, {
            "ATTEST_EXECUTOR_MODEL_PROVIDER": "openai",
            "ATTEST_EXECUTOR_MODEL_BASE_URL": executor_model.base_url,
            "ATTEST_EXECUTOR_MODEL_MODEL": "scripted-agent",
            "ATTEST_VERIFIER_MODEL_PROVIDER": "openai",
            "ATTEST_VERIFIER_MODEL_BASE_URL": verifier_model.base_url,
            "ATTEST_VERIFIER_MODEL_MODEL": "scripted-guard",
            "ATTEST_VERIFIER_MODEL_TIMEOUT_SECONDS": "5",
        }, database_url=new_database(root))
        try:
            yield running, agent, verifier_model
        finally:
            running.stop()


def _guard_says(verdict: str) -> dict:
    return completion(json.dumps({"verdict": verdict, "reason": f"scripted {verdict}"}))


def test_unsupported_draft_falls_back_without_its_content(scripted, auth_metadata):
    running, agent, guard = scripted
    agent.break_protocol = False
    agent.final = lambda: _draft("payment-service 的支付网关证书已过期，导致大量 ERROR。")
    guard.add(_guard_says("UNSUPPORTED"))
    requests_before = len(guard.requests)
    response, run = _diagnose(running.gateway_addr, running.database_url, "payment-service 为什么报错？", auth_metadata)
    assert _release(response) == ("FALLBACK", "SEMANTIC_UNSUPPORTED")
    assert "证书" not in response.answer and "scripted UNSUPPORTED" not in response.answer
    assert "【已核实的数据来源】" in response.answer
    # The sources in our words (tool, invocation, scope of the stored request), never its raw text.
    sources = response.answer.split("【已核实的数据来源】", 1)[1].split("【", 1)[0]
    assert "query_logs #" in sources and "服务 payment-service" in sources, sources
    assert "service=" not in sources and "start=" not in sources, sources
    assert len(guard.requests) - requests_before == 1, "UNSUPPORTED is never retried"
    sent = guard.requests[-1]["messages"][-1]["content"]
    assert "call_logs" not in sent, "SemanticGuard never sees tool call ids"


def test_a_conclusion_that_does_not_answer_the_question_is_not_released(scripted, auth_metadata):
    """The Draft is never edited, so a conclusion that does not open with the
    direct answer falls back (SEMANTIC_UNSUPPORTED) before any SemanticGuard model call, and the
    rejection ledger says why (stage answer_guard)."""
    running, agent, guard = scripted
    agent.break_protocol = False
    agent.final = lambda: json.dumps({**json.loads(_draft("x")), "conclusion": {
        "text": "payment-service 在查询窗口内有 ERROR 日志。", "analysis_refs": ["a1"]}}, ensure_ascii=False)
    requests_before = len(guard.requests)
    response, run = _diagnose(running.gateway_addr, running.database_url, "payment-service 为什么报错？", auth_metadata)
    assert _release(response) == ("FALLBACK", "SEMANTIC_UNSUPPORTED")
    assert "在查询窗口内有 ERROR 日志" not in response.answer
    assert len(guard.requests) == requests_before, "no SemanticGuard model call"
    evaluation = run["self_evaluation"]["verifier_evaluation"]
    assert evaluation["single_react"]["answer_guard"] == {"passed": False, "checks": ["answer.opening_missing"]}
    assert [(e["stage"], e["item"], e["check"]) for e in evaluation["rejection_ledger"]] == [
        ("answer_guard", "conclusion", "answer.opening_missing")]


def test_a_health_answer_that_denies_the_error_lines_it_cites_is_not_released(scripted, auth_metadata):
    running, agent, guard = scripted
    agent.break_protocol = False
    agent.final = lambda: json.dumps({**json.loads(_draft("x")), "conclusion": {
        "text": "在所查范围内未发现异常（payment-service：ERROR 日志）。", "analysis_refs": ["a1"]}}, ensure_ascii=False)
    requests_before = len(guard.requests)
    response, run = _diagnose(running.gateway_addr, running.database_url, "payment-service 最近一小时正常吗？", auth_metadata)
    assert _release(response) == ("FALLBACK", "SEMANTIC_UNSUPPORTED")
    assert "在所查范围内未发现异常" not in response.answer
    assert len(guard.requests) == requests_before
    ledger = run["self_evaluation"]["verifier_evaluation"]["rejection_ledger"]
    assert [(e["stage"], e["check"]) for e in ledger] == [("answer_guard", "answer.opening_contradicted")]


def test_guard_that_keeps_failing_is_semantic_unavailable(scripted, auth_metadata):
    running, agent, guard = scripted
    agent.break_protocol = False
    agent.final = lambda: _draft("payment-service 在查询窗口内有 ERROR 日志。")
    guard.add(completion("not json"), completion("still not json"))
    response, run = _diagnose(running.gateway_addr, running.database_url, "payment-service 为什么报错？", auth_metadata)
    assert _release(response) == ("FALLBACK", "SEMANTIC_UNAVAILABLE")
    assert run["self_evaluation"]["verifier_evaluation"]["single_react"]["semantic_guard"]["attempts"] == 2
    assert "ERROR 日志" not in response.answer


def test_unrepairable_reference_is_evidence_validation_failed_with_no_sources(scripted, auth_metadata):
    running, agent, guard = scripted
    agent.break_protocol = False
    agent.final = lambda: _draft("payment-service 在查询窗口内有 ERROR 日志。", tool_call_id="call_fabricated_zz")
    requests_before = len(guard.requests)
    response, run = _diagnose(running.gateway_addr, running.database_url, "payment-service 为什么报错？", auth_metadata)
    assert _release(response) == ("FALLBACK", "EVIDENCE_VALIDATION_FAILED")
    assert "【已核实的数据来源】" not in response.answer
    assert len(guard.requests) == requests_before, "SemanticGuard is not invoked"
    react = run["self_evaluation"]["verifier_evaluation"]["single_react"]
    assert not react["guard"]["passed"]
    assert react["repair"] == "still failing EvidenceGuard"
    assert not react["guard_after_repair"]["passed"]


def test_progress_protocol_saturation_without_verified_progress_says_so(scripted, auth_metadata):
    """INSUFFICIENT_EVIDENCE only with a non-empty verified snapshot."""
    running, agent, guard = scripted
    agent.break_protocol = True
    agent.final = lambda: _draft("payment-service 在查询窗口内有 ERROR 日志。")
    response, run = _diagnose(running.gateway_addr, running.database_url, "payment-service 为什么报错？", auth_metadata)
    assert _release(response) == ("FALLBACK", "NO_VERIFIED_PROGRESS")
    assert run["fallback_type"] == "NO_VERIFIED_PROGRESS"
    assert "停止" in response.answer and "ERROR 日志" not in response.answer
    assert run["self_evaluation"]["verifier_evaluation"]["single_react"]["stop_reason"] == "PROGRESS_PROTOCOL_VIOLATED"
    # No step was ever validly recorded, so there is no verified progress to publish.
    assert "【已完成的检查中观察到】" not in response.answer
    assert "ERROR 日志" not in response.answer


def test_a_model_outage_with_an_empty_snapshot_is_agent_unavailable(scripted, auth_metadata):
    """A model outage is not INSUFFICIENT_EVIDENCE; the answer says what happened."""
    running, agent, guard = scripted
    agent.break_protocol = False
    agent.outage = True
    try:
        response, run = _diagnose(running.gateway_addr, running.database_url, "payment-service 为什么报错？", auth_metadata)
    finally:
        agent.outage = False
    assert _release(response) == ("FALLBACK", "AGENT_UNAVAILABLE")
    assert run["self_evaluation"]["verifier_evaluation"]["single_react"]["stop_reason"] == "MODEL_UNAVAILABLE"
    assert run["fallback_type"] == "AGENT_UNAVAILABLE"
    assert "模型暂时不可用" in response.answer and "稍后重试" in response.answer
    assert "【已完成的检查中观察到】" not in response.answer
    assert "scripted outage" not in response.answer
