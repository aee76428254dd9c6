"""No data is not health: the checked services and windows whose evidence cannot show health,
read from the stored invocations, named in our words.

A service checked over a window is *empty* (`no_data`) when every metrics call for it completed
with no series at all (a call that named metrics and found none of them: those metrics had no
data) and every logs call for it counted no line of any level over the window
(`LogsResult.window_lines == 0`). Its logs *cannot be classified* (`unclassified`) when a logs call
completed, no line at a bad level was found, and most lines of the window had a level that could
not be read (`unclassified_lines`, `_mostly_unclassified`): those lines may hide errors. Either way an answer that nothing was
found would read the absence of evidence as health: the answer says 无法确认 and names what was
empty, and the verdict is at most LOW_CONFID unless something confirmed abnormal remains.

Only completed calls of this run count (failed ones are `shared.failed_calls`' business); a count
the backend did not give (None) is unknown and never read as no data. Results are read typed
(`shared.core.tool_results.read_result`), never from their rendered text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shared.core.contracts import EmptyScope, ToolInvocation, Verdict
from shared.core.log_levels import BAD_LEVELS
from shared.core.tool_catalogue import QUERY_LOGS, QUERY_METRICS
from shared.core.tool_results import LogsResult, MetricsResult, read_result
from shared.failed_calls import is_failed

MAX_NAMED = 3
_NAME = re.compile(r"[A-Za-z0-9._:/@+-]{1,120}")


@dataclass
class _Calls:
    metrics: list[tuple[int, MetricsResult]] = field(default_factory=list)
    logs: list[tuple[int, LogsResult]] = field(default_factory=list)
    starts: list[str] = field(default_factory=list)
    ends: list[str] = field(default_factory=list)
    unreadable: bool = False


def _service(invocation: ToolInvocation, result: MetricsResult | LogsResult | None) -> str:
    value = invocation.request.get("service")
    if not isinstance(value, str) and result is not None:
        value = result.service
    return value.casefold() if isinstance(value, str) else ""


def _stamp(result: MetricsResult | LogsResult, invocation: ToolInvocation, key: str) -> str:
    value = getattr(result, key) or invocation.request.get(key)
    return value if isinstance(value, str) and _NAME.fullmatch(value) else ""


def empty_scopes(invocations: Iterable[ToolInvocation], run_id: str | None = None) -> list[EmptyScope]:
    """Every checked service of the run whose evidence cannot show health, in the order its first
    metrics or logs call was begun."""
    by_service: dict[str, _Calls] = {}
    for invocation in invocations:
        if (run_id is not None and invocation.run_id != run_id) or invocation.abandoned:
            continue
        if invocation.tool_name not in (QUERY_METRICS, QUERY_LOGS) or invocation.lifecycle != "READY" \
                or is_failed(invocation):
            continue
        result = read_result(invocation.tool_name, invocation.agent_result)
        service = _service(invocation, result if isinstance(result, MetricsResult | LogsResult) else None)
        if not service:
            continue
        calls = by_service.setdefault(service, _Calls())
        if isinstance(result, MetricsResult):
            calls.metrics.append((invocation.invocation_id, result))
        elif isinstance(result, LogsResult):
            calls.logs.append((invocation.invocation_id, result))
        else:
            calls.unreadable = True  # a stored result we cannot read: unknown, never no data
            continue
        calls.starts.append(_stamp(result, invocation, "start"))
        calls.ends.append(_stamp(result, invocation, "end"))
    scopes: list[EmptyScope] = []
    for service, calls in by_service.items():
        scope = None if calls.unreadable else _scope(service, calls)
        if scope is not None:
            scopes.append(scope)
    return scopes


def _scope(service: str, calls: _Calls) -> EmptyScope | None:
    ids = [i for i, _ in calls.metrics] + [i for i, _ in calls.logs]
    starts = sorted(s for s in calls.starts if s)
    ends = sorted(e for e in calls.ends if e)
    window = {"start": starts[0] if starts else "", "end": ends[-1] if ends else ""}
    logs = [result for _, result in calls.logs]
    unclassified = sum(result.unclassified_lines or 0 for result in logs)
    bad_hit = any(hit.level.upper() in BAD_LEVELS for result in logs for hit in result.hits)
    if not bad_hit and any(_mostly_unclassified(result) for result in logs):
        return EmptyScope(service=service, state="unclassified", unclassified_lines=unclassified,
                          invocation_ids=[i for i, _ in calls.logs], **window)
    metrics = [result for _, result in calls.metrics]
    if any(result.series for result in metrics):
        return None
    # A log line counted or returned is data; a count the backend did not give is unknown.
    if any(result.hits or result.total_matches or result.window_lines is None or result.window_lines > 0
           for result in logs):
        return None
    if not metrics and not logs:
        return None
    metrics_empty = any(result.metric is None for result in metrics)
    named = [] if metrics_empty else list(dict.fromkeys(r.metric for r in metrics if r.metric))
    return EmptyScope(service=service, state="no_data", metrics_empty=metrics_empty, empty_metrics=named,
                      logs_empty=bool(logs), invocation_ids=ids, **window)


def _mostly_unclassified(result: LogsResult) -> bool:
    """Whether most of the window's lines (all of the read ones when the window was not counted)
    had no readable level: then the logs were not classified, and finding no error among them
    proves nothing. A few lines without a level among many classified ones (access lines beside
    levelled application lines) leave the reading standing."""
    unknown = result.unclassified_lines or 0
    if unknown == 0:
        return False
    if result.window_lines is None:
        return unknown >= len(result.hits)
    return 2 * unknown > result.window_lines


def _names(names: Sequence[str]) -> str:
    shown = [name for name in names if _NAME.fullmatch(name)][:MAX_NAMED]
    more = f" 等 {len(names)} 个" if len(names) > len(shown) else ""
    return "、".join(shown) + more


def empty_scope_phrase(scope: EmptyScope) -> str:
    """「api-gateway 在 <start> 至 <end> 没有数据（指标：没有任何序列；日志：没有任何级别的日志行）」.
    Times are written in UTC; the display step shows them in the configured zone."""
    service = scope.service if _NAME.fullmatch(scope.service) else "所查服务"
    window = f" 在 {scope.start} 至 {scope.end}" if scope.start and scope.end else ""
    if scope.state == "unclassified":
        return (f"{service}{window} 有 {scope.unclassified_lines} 行日志无法识别级别"
                "（其中可能有错误或告警）")
    parts: list[str] = []
    if scope.metrics_empty:
        parts.append("指标：没有任何序列")
    elif scope.empty_metrics:
        names = _names(scope.empty_metrics)
        parts.append(f"指标 {names} 没有数据" if names else "所查指标没有数据")
    if scope.logs_empty:
        parts.append("日志：没有任何级别的日志行")
    detail = f"（{'；'.join(parts)}）" if parts else ""
    return f"{service}{window} 没有数据{detail}"


def empty_summary(scopes: Sequence[EmptyScope]) -> str:
    """What was empty, for a first line: the first few scopes' phrases."""
    phrases = [empty_scope_phrase(scope) for scope in scopes[:MAX_NAMED]]
    more = f"等 {len(scopes)} 处" if len(scopes) > MAX_NAMED else ""
    return "；".join(phrases) + more


def empty_gap_line(scope: EmptyScope) -> str:
    """The scope as an evidence gap: what was empty, and why that is no ground for health."""
    return f"{empty_scope_phrase(scope)}：没有数据不等于正常，不能据此判断是否有异常（调用 " \
        + "、".join(f"#{i}" for i in scope.invocation_ids[:MAX_NAMED * 2]) + "）。"


def empty_step(scopes: Sequence[EmptyScope]) -> list[str]:
    """What to do next: check that the data is collected, or ask about a window that has data."""
    if not scopes:
        return []
    services = _names(list(dict.fromkeys(scope.service for scope in scopes)))
    if all(scope.state == "unclassified" for scope in scopes):
        return [f"确认 {services} 的日志带有可识别的级别（级别标签，或行内的级别字段）后重新诊断，或直接人工查看这些日志。"]
    return [f"确认 {services} 在所问时段的指标与日志确实已采集（或改问一个有数据的时间段）后重新提问。"]


def cap_for_empty_scopes(verdict: Verdict, scopes: Sequence[EmptyScope], anomaly_confirmed: bool) -> Verdict:
    """PASS becomes LOW_CONFID while a checked scope is empty and nothing confirmed abnormal
    remains: the absence of data is no evidence of health."""
    if scopes and not anomaly_confirmed and verdict == "PASS":
        return "LOW_CONFID"
    return verdict
