"""What the embedded single-ReAct agent checked, as Analyses and as the scope of its answer
(issue 15, point 3: healthy is an answer).

A Draft that says 「在所查范围内未发现异常」 must say what that range was and show each part of it:

- `checked_items`: one item per check the derived findings left unstated, in our own words from
  the call's canonical record (its projection and evidence ref texts, never model text):
  - a metric series the executor's anomaly test (`metric_anomaly.assess_series`) reads as quiet
    over the window, with its maximum and median (a series with an anomaly or too few points is
    never stated here: the findings carry the former, the limitations the latter);
  - the matching log lines of a log search whose lines were not significant (routine noise):
    their count and one line, quoted — a reading, not an anomaly and not a sign of health;
  - each change record (a routine change with no anomaly after it is mentioned, not blamed);
  - a search that matched nothing (no log line at the levels asked, no change record, no series).
  Each item cites exactly its own call; its kind follows that call's evidence status.
- `scope_text`: per service, the window and metrics read, the log levels searched and the change
  window, built from the same records, so that every name and time in it occurs in the evidence
  of the Analyses the conclusion cites.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from services.executor.log_clusters import cluster_hits
from services.executor.metric_anomaly import assess_series
from services.executor.tools.metrics_tool import no_series_text
from shared.contracts import ToolInvocation

MAX_SERIES_ITEMS = 8  # quiet series stated per metrics call
MAX_CHANGE_ITEMS = 3  # change records stated per changes call
MAX_SCOPE_SERVICES = 4
MAX_SCOPE_METRICS = 6
# `<service> <metric> <start>..<end>: <n> points, min=…, median=…, max=… at <ts>` (tools/metrics_tool.py)
# `<ts> <LEVEL> <service> host=<host> <message>` (tools/logs_tool.py)
_HIT = re.compile(r"^\S+ (?P<level>[A-Z]+) \S+ host=\S* (?P<message>.*)$", re.S)
MAX_QUOTE_CHARS = 100
_SERIES_SUMMARY = re.compile(r"median=(?P<median>[^,]+), max=(?P<max>.+) at (?P<max_at>\S+)$")

READING = "reading"  # a state that is neither an anomaly nor a quiet signal (routine log lines)
NORMAL_STATE, CHANGE_STATE = "normal", "change"


@dataclass(frozen=True)
class CheckedItem:
    text: str
    tool_call_id: str
    state: str  # NORMAL_STATE (quiet series, no-hit), CHANGE_STATE, READING
    negative: bool  # the call found nothing: a NEGATIVE_OBSERVATION


def _ready(invocation: ToolInvocation) -> dict[str, Any] | None:
    if invocation.lifecycle != "READY" or invocation.evidence_status not in ("EVIDENCE_FOUND", "NO_EVIDENCE"):
        return None
    try:
        data = json.loads(invocation.agent_result or "")
    except (TypeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _refs(invocation: ToolInvocation) -> dict[str, str]:
    details = invocation.retrieval_details
    return {ref.raw_path: ref.text for ref in details.evidence_refs} if details else {}


def _levels(data: dict[str, Any]) -> str:
    return "/".join(str(level) for level in data.get("level") or [])


def _series(data: dict[str, Any]) -> list[tuple[int, str, str, list[float]]]:
    out = []
    for i, item in enumerate(data.get("series") or []):
        if not isinstance(item, dict):
            continue
        values = [float(p[1]) for p in item.get("points") or [] if isinstance(p, list) and len(p) == 2]
        out.append((i, str(item.get("metric", "")), str(item.get("unit", "")), values))
    return out


def quiet_metrics(invocation: ToolInvocation) -> list[str]:
    """The metrics of a metrics call that the anomaly test reads as quiet (enough points, no rise)."""
    data = _ready(invocation)
    if data is None or invocation.tool_name != "query_metrics":
        return []
    quiet = []
    for _, metric, unit, values in _series(data):
        assessment = assess_series(metric, unit, values)
        if not assessment.insufficient and assessment.anomaly is None:
            quiet.append(metric)
    return quiet


def checked_items(invocations: list[ToolInvocation], stated: dict[str, list[str]]) -> list[CheckedItem]:
    """Items for the checks `stated` (tool_call_id -> the texts of Analyses citing it) leaves out."""
    items: list[CheckedItem] = []
    for invocation in invocations:
        data = _ready(invocation)
        if data is None:
            continue
        said = stated.get(invocation.tool_call_id, [])
        negative = invocation.evidence_status == "NO_EVIDENCE"
        service = str(data.get("service") or invocation.request.get("service") or "")
        start, end = str(data.get("start") or ""), str(data.get("end") or "")
        if invocation.tool_name == "query_metrics":
            if negative:
                if not said:
                    items.append(CheckedItem(no_series_text(service, start, end, data.get("absent")),
                                             invocation.tool_call_id, NORMAL_STATE, True))
                continue
            refs = _refs(invocation)
            quiet = set(quiet_metrics(invocation))
            count = 0
            for i, metric, _, _ in _series(data):
                if metric not in quiet or any(metric in text for text in said) or count >= MAX_SERIES_ITEMS:
                    continue
                match = _SERIES_SUMMARY.search(refs.get(f"series[{i}].summary", ""))
                if match is None:
                    continue
                items.append(CheckedItem(
                    f"{service} 的 {metric} 在 {start} 至 {end} 期间最高为 {match['max']}（{match['max_at']}），"
                    f"中位数 {match['median']}，未见明显升高。",
                    invocation.tool_call_id, NORMAL_STATE, False))
                count += 1
        elif said:
            continue  # the findings already state what this call showed
        elif invocation.tool_name == "query_logs":
            if negative:
                levels = _levels(data) or "任何级别的"
                contains = data.get("contains")
                what = f"包含「{contains}」的{levels}" if contains else levels
                items.append(CheckedItem(f"{service} 在 {start} 至 {end} 期间没有 {what} 日志（0 matching lines）。",
                                         invocation.tool_call_id, NORMAL_STATE, True))
            else:
                text = _log_reading(invocation, data, service, start, end)
                if text:
                    items.append(CheckedItem(text, invocation.tool_call_id, READING, False))
        elif invocation.tool_name == "query_changes":
            if negative:
                if service:
                    items.append(CheckedItem(f"{service} 在 {start} 至 {end} 期间没有变更记录（0 change records）。",
                                             invocation.tool_call_id, NORMAL_STATE, True))
                continue
            for change in (data.get("changes") or [])[:MAX_CHANGE_ITEMS]:
                if not isinstance(change, dict) or not change.get("ts"):
                    continue
                who = f"（执行人 {change['author']}）" if change.get("author") else ""
                items.append(CheckedItem(
                    f"{change.get('service') or service} 在 {change['ts']} 有一次 {change.get('kind') or ''} 变更{who}："
                    f"{change.get('summary') or ''}。".replace("  ", " "),
                    invocation.tool_call_id, CHANGE_STATE, False))
    return items


def _quoted(message: str) -> str:
    """A log message for a quote: whole, or cut before a space or comma (never inside a number)."""
    message = " ".join(message.split())
    if len(message) <= MAX_QUOTE_CHARS:
        return message
    cut = max(message.rfind(" ", 0, MAX_QUOTE_CHARS), message.rfind(",", 0, MAX_QUOTE_CHARS))
    return message[: cut if cut > 0 else MAX_QUOTE_CHARS].rstrip(" ,") + "…"


def _log_reading(invocation: ToolInvocation, data: dict[str, Any], service: str, start: str, end: str) -> str | None:
    """「svc 在 … 期间有 N 条匹配的 ERROR/WARN 日志，例如：「…」」: what was seen, no judgement."""
    hits = [h for h in data.get("hits") or [] if isinstance(h, dict)]
    total = data.get("total_matches")
    count = total if isinstance(total, int) and not isinstance(total, bool) else len(hits)
    clusters = cluster_hits(hits)
    index = clusters[0].hit_indexes[0] if clusters else 0
    match = _HIT.match(_refs(invocation).get(f"hits[{index}]", ""))
    if not hits or match is None:
        return None
    levels = _levels(data)
    return (f"{service} 在 {start} 至 {end} 期间有 {count} 条匹配的{' ' + levels + ' ' if levels else ''}日志"
            f"（最常见的一类为 {match['level']}），例如：「{_quoted(match['message'])}」。")


def scope_text(invocations: list[ToolInvocation], named_metrics: set[str]) -> str:
    """「svc：<start> 至 <end> 的指标 m1、m2，ERROR/WARN 日志，<start> 至 <end> 的变更记录」 per service,
    from the records of the verified calls; only metrics in `named_metrics` (those some cited
    Analysis states) are named."""
    parts: dict[str, list[str]] = {}
    for invocation in invocations:
        data = _ready(invocation)
        if data is None:
            continue
        service = str(data.get("service") or invocation.request.get("service") or "")
        if not service:
            continue
        start, end = str(data.get("start") or ""), str(data.get("end") or "")
        window = f"{start} 至 {end} " if start and end else ""
        if invocation.tool_name == "query_metrics":
            metrics = [m for _, m, _, _ in _series(data) if m in named_metrics][:MAX_SCOPE_METRICS]
            if metrics:
                parts.setdefault(service, []).append(f"{window}的指标 {'、'.join(metrics)}")
        elif invocation.tool_name == "query_logs":
            levels = _levels(data)
            parts.setdefault(service, []).append(f"{levels} 日志" if levels else "日志")
        elif invocation.tool_name == "query_changes":
            parts.setdefault(service, []).append(f"{window}的变更记录")
    shown = list(parts.items())[:MAX_SCOPE_SERVICES]
    text = "；".join(f"{service}：{'，'.join(dict.fromkeys(checks))}" for service, checks in shown)
    return text + ("；等服务" if len(parts) > MAX_SCOPE_SERVICES else "")
