"""Typed progress events: the stable codes, the short Chinese messages, the
typed details, and the one conversion from a persisted orchestration event to a ProgressEvent.

DiagnoseStream and GetRun both build their ProgressEvents with `to_progress_event` from the same
event record (the stream from the record it is about to persist, GetRun from the stored row), so a
replay is the stream, seq for seq. The typed part of an event is kept in its payload under
PROGRESS_KEY; no column was added.

A Chinese message is our words with counts, tool names of a safe shape, rule ids, codes and enum
values only: never model text, tool output or the user's question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import events_pb2, gateway_pb2
from shared.call_scope import call_scope
from shared.core.contracts import ToolInvocation
from shared.proto_convert import enum_member

# The key of the typed part of an event in orchestration_event.payload.
PROGRESS_KEY = "progress_event"

Kind = events_pb2.ProgressEventKind
PHASES = {"ENTER": events_pb2.PROGRESS_EVENT_PHASE_ENTER, "EXIT": events_pb2.PROGRESS_EVENT_PHASE_EXIT,
          "INFO": events_pb2.PROGRESS_EVENT_PHASE_INFO}
# The oneof field of each detail message.
_DETAIL_FIELDS: dict[type[Message], str] = {
    events_pb2.StartedDetails: "started", events_pb2.PlanningDetails: "planning",
    events_pb2.ExecutorDetails: "executor", events_pb2.ToolCallDetails: "tool_call",
    events_pb2.GatekeeperDetails: "gatekeeper", events_pb2.VerifierDetails: "verifier",
    events_pb2.RetryDetails: "retry", events_pb2.VerdictCapDetails: "verdict_cap",
    events_pb2.RepairDetails: "repair", events_pb2.ComposingDetails: "composing",
    events_pb2.AnswerDetails: "answer", events_pb2.FallbackDetails: "fallback",
}
_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_FALLBACK_ZH = {
    "PRE_VERIFICATION": "核验前回退", "MISSING_REQUIRED_CONTEXT": "缺少服务名称等必要信息",
    "UNKNOWN_SERVICE": "没有找到所问的服务", "EVIDENCE_VALIDATION_FAILED": "证据引用未通过核验",
    "SEMANTIC_UNSUPPORTED": "结论未得到证据支持", "SEMANTIC_UNAVAILABLE": "语义核验不可用",
    "INSUFFICIENT_EVIDENCE": "证据不足以得出结论", "AGENT_UNAVAILABLE": "诊断模型不可用",
    "NO_VERIFIED_PROGRESS": "没有经核验的检查结果", "RUN_INTERRUPTED": "诊断被中断",
    "GUARD_UNAVAILABLE": "证据核验服务不可用",
}


@dataclass(frozen=True)
class Typed:
    """What an event says to a program (kind, code, details) and to a person (message_zh)."""

    kind: events_pb2.ProgressEventKind
    code: str
    message_zh: str
    details: Message | None = None

    @property
    def legacy_kind(self) -> str:
        """Today's `kind` string for an event that had none before: the enum's name, lower case."""
        return Kind.Name(self.kind).removeprefix("PROGRESS_EVENT_KIND_").lower()


def _verdict(value: str | None) -> enums_pb2.Verdict:
    return enum_member(enums_pb2.Verdict, value)


def _name(value: str) -> str:
    return value if _SAFE_NAME.fullmatch(value) else "未知工具"


# -- the events of a run, in flow order -----------------------------------------------------------

def started(mode: str) -> Typed:
    label = "单智能体 ReAct 模式" if mode == "SINGLE_REACT" else "多智能体模式"
    return Typed(Kind.PROGRESS_EVENT_KIND_STARTED, "RUN_STARTED", f"开始诊断：{label}",
                 events_pb2.StartedDetails(mode=enum_member(enums_pb2.DiagnosisMode, mode)))


def planner_enter(planner_mode: str) -> Typed:
    text = "正在规划补充取证" if planner_mode == "EVIDENCE_GAP_ONLY" else "正在规划检查"
    return Typed(Kind.PROGRESS_EVENT_KIND_PLANNING, "PLANNER_ENTER", text,
                 events_pb2.PlanningDetails(planner_mode=enum_member(enums_pb2.PlannerMode, planner_mode)))


def planner_exit(steps: int, services: list[str]) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_PLANNING, "PLANNER_EXIT_OK", f"规划完成：{steps} 项检查",
                 events_pb2.PlanningDetails(steps=steps, services=services))


def follow_up(services: list[str], *, shifted: bool) -> Typed:
    """A follow-up question planned with what the session's last run looked at."""
    window = "平移后的时间窗口" if shifted else "时间窗口"
    return Typed(Kind.PROGRESS_EVENT_KIND_PLANNING, "PLANNER_FOLLOW_UP",
                 f"追问：沿用上一轮的 {len(services)} 个服务和{window}",
                 events_pb2.PlanningDetails(services=services))


def agent_enter(max_steps: int) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_PLANNING, "AGENT_ENTER", f"智能体开始检查：最多 {max_steps} 步",
                 events_pb2.PlanningDetails(max_steps=max_steps))


def agent_exit(stop_reason: str, has_draft: bool, tool_calls: int, observed_facts: int) -> Typed:
    details = events_pb2.ExecutorDetails(tool_calls=tool_calls, observed_facts=observed_facts, stop_reason=stop_reason)
    if stop_reason:
        return Typed(Kind.PROGRESS_EVENT_KIND_TOOL_CALL, "AGENT_EXIT_STOPPED",
                     f"智能体提前停止：工具调用 {tool_calls} 次", details)
    if has_draft:
        return Typed(Kind.PROGRESS_EVENT_KIND_TOOL_CALL, "AGENT_EXIT_DRAFT",
                     f"智能体完成：工具调用 {tool_calls} 次，已写出草稿", details)
    return Typed(Kind.PROGRESS_EVENT_KIND_TOOL_CALL, "AGENT_EXIT_NO_DRAFT",
                 f"智能体结束：工具调用 {tool_calls} 次，没有可用草稿", details)


def executor_enter(steps: int) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_TOOL_CALL, "EXECUTOR_ENTER", f"正在取证：{steps} 项检查",
                 events_pb2.ExecutorDetails())


def unknown_services(names: list[str], *, agent: bool) -> Typed:
    """Every named service is unknown: the names are in the details, the message counts them."""
    return Typed(Kind.PROGRESS_EVENT_KIND_TOOL_CALL, "AGENT_EXIT_UNKNOWN_SERVICE" if agent else "EXECUTOR_EXIT_UNKNOWN_SERVICE",
                 f"所问的服务均未找到：{len(names)} 个", events_pb2.ExecutorDetails(services_unknown=names))


def executor_exit(parse_status: str, invocation_ids: list[int], checked: list[str], unknown: list[str],
                  disabled: list[str]) -> Typed:
    details = events_pb2.ExecutorDetails(
        parse_status=enum_member(enums_pb2.ParseStatus, parse_status), invocation_ids=invocation_ids,
        services_checked=checked, services_unknown=unknown, disabled_tools=disabled)
    if parse_status == "valid":
        return Typed(Kind.PROGRESS_EVENT_KIND_TOOL_CALL, "EXECUTOR_EXIT_OK",
                     f"取证结束：工具调用 {len(invocation_ids)} 次", details)
    return Typed(Kind.PROGRESS_EVENT_KIND_TOOL_CALL, "EXECUTOR_EXIT_INVALID_OUTPUT",
                 f"取证结束，但执行器输出不合规（{parse_status}）", details)


def replica_lost(attempt: int) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_TOOL_CALL, "EXECUTOR_REPLICA_LOST", "执行器副本丢失，改由其他副本重试",
                 events_pb2.ExecutorDetails(attempt=attempt))


def _status(statuses: list[str | None]) -> str:
    """The status of calls reported as one: evidence if any found some, else none if any ran."""
    for status in ("EVIDENCE_FOUND", "NO_EVIDENCE"):
        if status in statuses:
            return status
    return "ERROR"


def _arguments_summary(request: dict[str, Any]) -> str:
    """The request's scope in our words; for a tool whose arguments have no such scope (knowledge
    lookups), the names of its arguments. Never an argument's value of free text."""
    scope = call_scope(request)
    if scope:
        return scope
    names = [key for key in request if key != "tool" and _SAFE_NAME.fullmatch(key)]
    return "参数 " + "、".join(names) if names else "无参数"


def tool_call(tool_name: str, invocations: list[ToolInvocation], invocation_ids: list[int],
              evidence_level: str = "") -> Typed:
    """Persisted tool calls reported as one: a call, or the calls of one topic the executor's
    trace summary groups. Status and refs as the store recorded them; without the records (no
    invocation store), the status is the trace summary's `evidence_level`."""
    tool = _name(tool_name)
    refs = sum(i.retrieval_details.ref_count for i in invocations if i.retrieval_details)
    if invocations:
        status = _status([i.evidence_status for i in invocations])
    else:
        status = evidence_level if evidence_level in ("EVIDENCE_FOUND", "ERROR") else "NO_EVIDENCE"
    details = events_pb2.ToolCallDetails(
        tool_name=tool_name, arguments_summary=_arguments_summary(invocations[0].request) if invocations else "",
        evidence_status=enum_member(enums_pb2.EvidenceStatus, status), ref_count=refs,
        invocation_ids=invocation_ids, tool_call_id=invocations[0].tool_call_id if invocations else "")
    if status == "EVIDENCE_FOUND":
        return Typed(Kind.PROGRESS_EVENT_KIND_TOOL_CALL, "TOOL_CALL_EVIDENCE_FOUND",
                     f"取证完成：{tool}，找到证据 {refs} 条", details)
    if status == "NO_EVIDENCE":
        return Typed(Kind.PROGRESS_EVENT_KIND_TOOL_CALL, "TOOL_CALL_NO_EVIDENCE", f"取证完成：{tool}，未找到证据", details)
    return Typed(Kind.PROGRESS_EVENT_KIND_TOOL_CALL, "TOOL_CALL_ERROR", f"取证失败：{tool}", details)


def gatekeeper_enter(check: str) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_GATEKEEPER, "GATEKEEPER_ENTER", "正在核验证据引用",
                 events_pb2.GatekeeperDetails(check=check))


def gatekeeper_exit(status: str, ceiling: str | None, failed_rules: list[str]) -> Typed:
    """CheckEvidence (multi-agent): status pass / warn / fail, the verdict ceiling, the failed rules."""
    rules = sorted(set(failed_rules))
    details = events_pb2.GatekeeperDetails(
        check="CHECK_EVIDENCE", status=enum_member(enums_pb2.GatekeeperStatus, status),
        verdict_ceiling=_verdict(ceiling), failed_rule_ids=rules, passed=status == "pass")
    code = {"pass": "GATEKEEPER_EXIT_PASS", "warn": "GATEKEEPER_EXIT_WARN"}.get(status, "GATEKEEPER_EXIT_FAIL")
    return Typed(Kind.PROGRESS_EVENT_KIND_GATEKEEPER, code,
                 f"引用核验：上限 {ceiling or '无'}，未通过规则 {len(rules)} 条", details)


def guard_exit(check: str, passed: bool, codes: list[str], violations: int) -> Typed:
    """EvidenceGuard (single-ReAct): passed or not, the violation codes."""
    details = events_pb2.GatekeeperDetails(check=check, failed_rule_ids=sorted(set(codes)), passed=passed)
    if passed:
        return Typed(Kind.PROGRESS_EVENT_KIND_GATEKEEPER, "GATEKEEPER_EXIT_PASS", "引用核验：通过", details)
    return Typed(Kind.PROGRESS_EVENT_KIND_GATEKEEPER, "GATEKEEPER_EXIT_FAIL",
                 f"引用核验：未通过，违规 {violations} 处", details)


def repair_enter(violations: int) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_REPAIR, "EVIDENCE_REPAIR_ENTER", f"正在修复证据引用：{violations} 处",
                 events_pb2.RepairDetails(violations=violations))


def repair_exit(accepted: bool) -> Typed:
    if accepted:
        return Typed(Kind.PROGRESS_EVENT_KIND_REPAIR, "EVIDENCE_REPAIR_EXIT_ACCEPTED", "引用修复：已接受",
                     events_pb2.RepairDetails(accepted=True))
    return Typed(Kind.PROGRESS_EVENT_KIND_REPAIR, "EVIDENCE_REPAIR_EXIT_REJECTED", "引用修复：未接受",
                 events_pb2.RepairDetails(accepted=False))


def answer_guard_fail(check_ids: list[str]) -> Typed:
    ids = sorted(set(check_ids))
    return Typed(Kind.PROGRESS_EVENT_KIND_VERIFIER, "ANSWER_GUARD_FAIL", f"回答检查未通过：{len(ids)} 项",
                 events_pb2.VerifierDetails(check="ANSWER_GUARD", failed_check_ids=ids))


def verifier_enter(check: str) -> Typed:
    text = "正在进行语义核验" if check == "SEMANTIC_GUARD" else "正在核验结论"
    return Typed(Kind.PROGRESS_EVENT_KIND_VERIFIER, "VERIFIER_ENTER", text, events_pb2.VerifierDetails(check=check))


def verifier_failed(check: str, status: str | None) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_VERIFIER, "VERIFIER_EXIT_FAILED", "核验未完成",
                 events_pb2.VerifierDetails(check=check, status=enum_member(enums_pb2.VerifierStatus, status or "FAILED")))


def verifier_exit(effective: str, model: str, score: float) -> Typed:
    details = events_pb2.VerifierDetails(
        check="VERIFY_CLAIMS", status=enums_pb2.VERIFIER_STATUS_COMPLETED, effective_verdict=_verdict(effective),
        model_verdict=_verdict(model), groundedness_score=score)
    return Typed(Kind.PROGRESS_EVENT_KIND_VERIFIER, "VERIFIER_EXIT_OK", f"核验结论：{effective}，得分 {score:.2f}", details)


def semantic_exit(verdict: str) -> Typed:
    details = events_pb2.VerifierDetails(
        check="SEMANTIC_GUARD", status=enums_pb2.VERIFIER_STATUS_COMPLETED,
        semantic_verdict=enum_member(enums_pb2.SemanticVerdict, verdict))
    text = "语义核验：结论有证据支持" if verdict == "SUPPORTED" else "语义核验：结论未得到证据支持"
    return Typed(Kind.PROGRESS_EVENT_KIND_VERIFIER, "VERIFIER_EXIT_OK", f"{text}（{verdict}）", details)


def retry_gap(gaps: int) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_RETRY, "RETRY_EVIDENCE_GAP", f"证据有缺口，补充取证：{gaps} 处",
                 events_pb2.RetryDetails(gaps=gaps))


def retry_failed(edge: str) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_RETRY, "RETRY_ROUND_FAILED", "补充取证未得出结论，沿用第 1 轮结果",
                 events_pb2.RetryDetails(edge=edge))


def rounds_merged(closed: int, still_open: int) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_RETRY, "RETRY_ROUNDS_MERGED",
                 f"两轮证据已合并：补齐缺口 {closed} 处，仍缺 {still_open} 处",
                 events_pb2.RetryDetails(closed_gaps=closed, open_gaps=still_open))


def coverage_cap(before: str, after: str) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_VERDICT_CAP, "VERDICT_CAP_COVERAGE",
                 f"部分服务未检查，结论由 {before} 降为 {after}",
                 events_pb2.VerdictCapDetails(verdict_before=_verdict(before), verdict=_verdict(after)))


def failed_calls_cap(before: str, after: str, invocation_ids: list[int]) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_VERDICT_CAP, "VERDICT_CAP_FAILED_CALLS",
                 f"{len(invocation_ids)} 次取证失败，结论由 {before} 降为 {after}",
                 events_pb2.VerdictCapDetails(verdict_before=_verdict(before), verdict=_verdict(after),
                                              invocation_ids=invocation_ids))


def empty_scope_cap(before: str, after: str, invocation_ids: list[int]) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_VERDICT_CAP, "VERDICT_CAP_EMPTY_SCOPE",
                 f"所查范围没有数据，结论由 {before} 降为 {after}",
                 events_pb2.VerdictCapDetails(verdict_before=_verdict(before), verdict=_verdict(after),
                                              invocation_ids=invocation_ids))


def composer_enter(verdict: str) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_COMPOSING, "COMPOSER_ENTER", "正在撰写回答",
                 events_pb2.ComposingDetails(effective_verdict=_verdict(verdict)))


def composer_unavailable() -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_COMPOSING, "COMPOSER_UNAVAILABLE", "撰写服务不可用，改用固定模板",
                 events_pb2.ComposingDetails())


def answer_composed(verdict: str, used_fallback_template: bool) -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_ANSWER, "ANSWER_COMPOSED", f"回答已生成：结论 {verdict}",
                 events_pb2.AnswerDetails(effective_verdict=_verdict(verdict),
                                          release_outcome=enums_pb2.RELEASE_OUTCOME_SUCCESS,
                                          used_fallback_template=used_fallback_template))


def answer_released() -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_ANSWER, "ANSWER_RELEASED", "回答已发布：草稿通过全部核验",
                 events_pb2.AnswerDetails(release_outcome=enums_pb2.RELEASE_OUTCOME_SUCCESS))


def fallback(fallback_type: str, cause: str | None = None, edge: str = "") -> Typed:
    details = events_pb2.FallbackDetails(fallback_type=enum_member(enums_pb2.FallbackType, fallback_type),
                                         fallback_cause=enum_member(enums_pb2.FallbackCause, cause), edge=edge)
    return Typed(Kind.PROGRESS_EVENT_KIND_FALLBACK, f"FALLBACK_{fallback_type}",
                 f"安全回退：{_FALLBACK_ZH.get(fallback_type, fallback_type)}", details)


def cancelled() -> Typed:
    return Typed(Kind.PROGRESS_EVENT_KIND_CANCELLED, "RUN_CANCELLED", "诊断已取消")


# -- storage and the one conversion -----------------------------------------------------------------

def stored_form(typed: Typed, *, node: str, phase: str, kind: str, message: str) -> dict[str, Any]:
    """The typed part of an event as it is kept in its payload (JSON of the ProgressEvent fields
    that the row's columns do not hold)."""
    event = gateway_pb2.ProgressEvent(kind=kind or typed.legacy_kind, node=node, message=message,
                                      event_kind=typed.kind, phase=PHASES[phase], code=typed.code,
                                      message_zh=typed.message_zh)
    if typed.details is not None:
        getattr(event, _DETAIL_FIELDS[type(typed.details)]).CopyFrom(typed.details)
    return json_format.MessageToDict(event, preserving_proto_field_name=True)


def _timestamp(value: datetime | str | None) -> datetime | None:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)  # SQLite returns the stored UTC time without its zone
    return value


def to_progress_event(record: dict[str, Any], *, run_id: str = "", session_id: str = "",
                      trace_id: str = "") -> gateway_pb2.ProgressEvent:
    """A ProgressEvent from an orchestration event record (seq, node, phase, status, reason,
    payload, created_at). `details` is the payload's JSON scalars and lists, as the stream always
    sent them. A record persisted before events were typed has no typed part: kind UNSPECIFIED, no code."""
    payload = dict(record.get("payload") or {})
    stored = payload.pop(PROGRESS_KEY, None)
    round_ = payload.pop("round", 0)
    event = gateway_pb2.ProgressEvent()
    if isinstance(stored, dict):
        json_format.ParseDict(stored, event, ignore_unknown_fields=True)
    else:
        status, reason = record.get("status") or "", record.get("reason") or ""
        event.node = record.get("node") or ""
        event.phase = PHASES.get(record.get("phase") or "", events_pb2.PROGRESS_EVENT_PHASE_UNSPECIFIED)
        event.message = f"{event.node} {str(record.get('phase') or '').lower()} {status}".strip() + (
            f": {reason}" if reason else "")
    event.seq = int(record["seq"])
    event.round = round_ if isinstance(round_, int) else 0
    at = _timestamp(record.get("created_at"))
    if at is not None:
        event.create_time.FromDatetime(at)
    event.details.update({k: v for k, v in payload.items() if isinstance(v, (str, int, float, bool, list))})
    event.run_id, event.session_id, event.trace_id = run_id, session_id, trace_id
    return event
