"""What a user must read when an evidence call failed, checked on the answer the
gateway returned: the two integration modules that break a backend (`test_failed_backends.py`,
`test_backend_failure_kinds.py`) share these checks.

- never 「可信度：高」/PASS, never a denial (未发现异常, 未显示异常, 证据不支持, nor a paraphrase such
  as 没有异常 / 运行正常 / 均正常: `shared.core.health_denials`);
- the failed query named in 【查询失败】 in our words, with its class (「无法连接后端」, 「后端返回
  HTTP 500」, 「后端超时无响应」, 「后端的响应不是预期的格式」), never the backend's own error text;
- the direct answer (when there is one: a fallback has none) reports an anomaly or says which
  query failed;
- single-ReAct: the Draft is released (no fallback), and its conclusion opens with the direct
  answer; when that answer reports no anomaly it opens 「无法确认：指标查询失败…」 (or, for a
  why-question, 「原因尚未由证据确认：指标查询失败…」).
"""

from __future__ import annotations

from typing import Any

import grpc

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from shared.core.direct_answer import FOUND, OPENINGS, UNKNOWN, YES
from shared.core.health_denials import denials
from shared.core.question_intent import classify_question
from shared.proto_convert import enum_number, spec_value

SINGLE_REACT = enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, "SINGLE_REACT")
MODES = {"multi_agent": 0, "single_react": SINGLE_REACT}
DENIALS = ("未发现异常", "未显示异常", "证据不支持")
FAILED_WORDS = {"query_logs": "日志查询", "query_metrics": "指标查询"}
CLASS_WORDS = {
    "unreachable": "无法连接后端",
    "http_error": "后端返回 HTTP 500",
    "timeout": "后端超时无响应",
    "not_backend_response": "后端的响应不是预期的格式",
}
# Backend error text that must never reach the answer.
RAW_ERROR_WORDS = ("ConnectError", "Connection refused", "Errno", "BackendError", "RemoteProtocolError",
                   "backend failure", "no response within", "unexpected response", "query processing failed",
                   "Bad Gateway")
# A first line that reports an anomaly needs no failure named in it.
_REPORTS_ANOMALY = (FOUND, YES, "原因尚未由证据确认；最明显的线索：", "最可能的原因：")


def diagnose(gateway_addr: str, query: str, metadata, mode: int = 0) -> gateway_pb2.DiagnoseResponse:
    request = gateway_pb2.DiagnoseRequest(query=query)
    if mode:
        request.mode = mode
    with grpc.insecure_channel(gateway_addr) as channel:
        return gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(request, timeout=120, metadata=metadata)


def conclusion_line(answer: str) -> str:
    """The first line of 【结论】 (the direct answer)."""
    lines = [line for line in answer.splitlines() if line.strip()]
    after = lines.index("【结论】") + 1 if "【结论】" in lines else 0
    return lines[after].removeprefix("- ") if after < len(lines) else ""


def check_failure_named(response: gateway_pb2.DiagnoseResponse, tool: str, service: str, error_class: str) -> None:
    """Every mode: not PASS, nothing denied, the failed query named with its class in our words."""
    answer = response.answer
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict) != "PASS", answer
    assert "可信度：高" not in answer, answer
    assert not any(word in answer for word in DENIALS), answer
    assert not denials(answer), (denials(answer), answer)
    failed = f"{FAILED_WORDS[tool]}失败：服务 {service}"
    named = [line for line in answer.splitlines() if line.startswith(f"- {failed}")]
    assert named, answer
    assert all(f"（{CLASS_WORDS[error_class]}，调用 #" in line for line in named), named
    assert "【查询失败】" in answer, answer
    assert not any(word in answer for word in RAW_ERROR_WORDS), answer
    if "【结论】" in answer.splitlines():  # a fallback has no direct answer, and denies nothing either
        first = conclusion_line(answer)
        assert first.startswith(_REPORTS_ANOMALY) or f"{FAILED_WORDS[tool]}失败" in first, first


def reports_anomaly(first_line: str) -> bool:
    return first_line.startswith(_REPORTS_ANOMALY)


def check_single_react_answer(response: gateway_pb2.DiagnoseResponse, run: dict[str, Any], query: str,
                              tool: str) -> str:
    """Single-ReAct: the Draft was released (no fallback) and its direct answer says which query
    failed unless it reports an anomaly; returns the conclusion's first line."""
    answer = response.answer
    assert spec_value(enums_pb2.ReleaseOutcome.DESCRIPTOR, response.release_outcome) == "SUCCESS", answer
    assert spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type) is None, answer
    react = run["self_evaluation"]["verifier_evaluation"]["single_react"]
    assert react["answer_guard"] == {"passed": True, "checks": []}, react
    assert answer.splitlines()[0].endswith("（部分查询失败，结论不涵盖失败的查询）"), answer
    first = conclusion_line(answer)
    openings = OPENINGS[classify_question(query).kind]
    assert not openings or first.startswith(openings), first
    if not reports_anomaly(first):
        assert first.startswith((f"{UNKNOWN}{FAILED_WORDS[tool]}失败", f"原因尚未由证据确认：{FAILED_WORDS[tool]}失败")), first
    return first
