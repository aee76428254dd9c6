"""Failed evidence calls: read from the stored invocations, named in our words.

A tool call whose backend failed (refused, timeout, HTTP error, a reply that is not the backend's
format) is stored with lifecycle / evidence_status ERROR and the error our tool code raised. It is
a fact about the run: the gatekeeper records it in its audit, the verifier sees it as a gap, the
retry planner plans the call again, the answer names it, and while it stands the verdict is at most
LOW_CONFID. A call the model made with bad arguments is not a backend failure (the tool refused
the arguments, nothing was asked of the backend) and is left out.

The error is classified into a fixed vocabulary; the stored text itself never reaches the answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from shared.call_scope import call_scope
from shared.core.contracts import FailedCall, ToolInvocation
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE, QUERY_CHANGES, QUERY_LOGS, QUERY_METRICS

ERROR_CLASSES = ("unreachable", "timeout", "http_error", "not_backend_response", "failed")
_BACKEND_FAILURE = "backend failure:"
_HTTP_STATUS = re.compile(r"\bHTTP (\d{3})\b")
_EXCEPTION_FIRST = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(?:Error|Exception|Timeout)\b")
_WHAT = {
    QUERY_METRICS: "指标查询失败",
    QUERY_LOGS: "日志查询失败",
    QUERY_CHANGES: "变更查询失败",
    LOOKUP_KNOWLEDGE: "知识库查询失败",
}
_WHY = {
    "unreachable": "无法连接后端",
    "timeout": "后端超时无响应",
    "not_backend_response": "后端的响应不是预期的格式",
    "failed": "后端调用失败",
}


def is_failed(invocation: ToolInvocation) -> bool:
    return invocation.lifecycle == "ERROR" or invocation.evidence_status == "ERROR"


def is_backend_failure(invocation: ToolInvocation) -> bool:
    """A failed call that reached for its backend: not refused arguments (ToolArgumentError)."""
    if not is_failed(invocation):
        return False
    error = invocation.error or ""
    # The registry wraps every backend exception as "<tool>: backend failure: …"; anything the
    # executor caught outside the registry starts with the exception's class name.
    return _BACKEND_FAILURE in error or bool(_EXCEPTION_FIRST.match(error)) or not error


def error_class(error: str) -> tuple[str, int]:
    """(class, HTTP status or 0) of a stored error text."""
    text = error or ""
    lowered = text.casefold()
    if status := _HTTP_STATUS.search(text):
        return "http_error", int(status.group(1))
    if "no response within" in lowered or "timeout" in lowered or "timed out" in lowered:
        return "timeout", 0
    if "connecterror" in lowered or "connection refused" in lowered or "request failed" in lowered \
            or "unreachable" in lowered or "operationalerror" in lowered:
        return "unreachable", 0
    if "unexpected response" in lowered or "expected a" in lowered or "is not [" in lowered:
        return "not_backend_response", 0
    return "failed", 0


def _service(invocation: ToolInvocation) -> str:
    value = invocation.request.get("service")
    return value.casefold() if isinstance(value, str) else ""


def failed_calls(invocations: Iterable[ToolInvocation], run_id: str | None = None) -> list[FailedCall]:
    """Every backend failure of the run, in the order the calls were begun. `recovered`: a later
    round ran the same tool for the same service and it completed. An abandoned invocation (a
    lost executor attempt's) is neither a failure nor a recovery."""
    rows = [i for i in invocations if (run_id is None or i.run_id == run_id) and not i.abandoned]
    done = [(i.round, i.tool_name, _service(i)) for i in rows if not is_failed(i) and i.lifecycle == "READY"]
    out: list[FailedCall] = []
    for invocation in rows:
        if not is_backend_failure(invocation):
            continue
        klass, status = error_class(invocation.error)
        service = _service(invocation)
        request = {**invocation.request, "tool": invocation.request.get("tool") or invocation.tool_name}
        out.append(FailedCall(
            tool_name=invocation.tool_name,
            invocation_id=invocation.invocation_id,
            round=invocation.round,
            scope=call_scope(request),
            service=service,
            error_class=klass,
            http_status=status,
            recovered=any(r > invocation.round and t == invocation.tool_name and s == service
                          for r, t, s in done),
        ))
    return out


def open_failures(calls: Sequence[FailedCall]) -> list[FailedCall]:
    """The failures no later round recovered: these cap the verdict and are named as open."""
    return [call for call in calls if not call.recovered]


def failed_call_line(call: FailedCall) -> str:
    """「指标查询失败：服务 x，全部指标，… （无法连接后端）」 — from the stored call only."""
    what = _WHAT.get(call.tool_name, f"{call.tool_name} 查询失败")
    why = f"后端返回 HTTP {call.http_status}" if call.error_class == "http_error" and call.http_status \
        else _WHY.get(call.error_class, _WHY["failed"])
    scope = call.scope or (f"服务 {call.service}" if call.service else "")
    retried = "；重试后已取得结果" if call.recovered else ""
    return f"{what}：{scope}（{why}，调用 #{call.invocation_id}）{retried}" if scope \
        else f"{what}（{why}，调用 #{call.invocation_id}）{retried}"


def failure_summary(calls: Sequence[FailedCall]) -> str:
    """The kinds of query that failed, e.g. 「指标查询、日志查询」 (for a first line)."""
    kinds = [_WHAT.get(c.tool_name, f"{c.tool_name} 查询失败").removesuffix("失败") for c in calls]
    return "、".join(dict.fromkeys(kinds))
