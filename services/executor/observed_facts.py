"""One short Chinese sentence per verified tool call: what the check was and what it returned.

These sentences are what the ProgressSnapshot publishes when the single-ReAct agent stops without
a releasable conclusion (spec "Fail-closed release policy": observed facts describe only actual
completed checks). So they are built by the system, never by the agent: only from a READY
invocation of an evidence tool whose evidence status is EVIDENCE_FOUND or NO_EVIDENCE, and only
from its canonical record — the query scope in its projection and the texts of its evidence refs
(the tools' own documented formats, `tools/*_tool.py`). A sentence states values, never a
judgement: no "正常", no cause. Which series or log lines to name reuses the embedded agent's
anomaly and clustering logic (`metric_anomaly.py`, `log_clusters.py`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from services.executor.log_clusters import cluster_hits
from services.executor.metric_anomaly import assess_series
from services.executor.tools.metrics_tool import no_series_text
from shared.contracts import EVIDENCE_TOOLS, ToolInvocation

MAX_FACT_CHARS = 200
MAX_SERIES_NAMED = 2
MAX_MESSAGE_CHARS = 60
MAX_CHANGE_CHARS = 80
VERIFIED_STATUSES = frozenset({"EVIDENCE_FOUND", "NO_EVIDENCE"})

# `<service> <metric> <start>..<end>: <n> points, min=…, median=…, max=… at <ts>`
_SERIES_SUMMARY = re.compile(r"median=(?P<median>[^,]+), max=(?P<max>.+) at (?P<max_at>\S+)$")
# `<ts> <LEVEL> <service> host=<host> <message>`
_HIT = re.compile(r"^\S+ [A-Z]+ \S+ host=\S* (?P<message>.*)$", re.S)
# A Java-style `[thread] logger - ` prefix: layout, not content.
_LOG_PREFIX = re.compile(r"^\[[^\]]{1,80}\]\s+(?:[\w.$]+\s+-\s+)?")
# Request-scoped ids say nothing about what happened.
_ID_FIELD = re.compile(r"[\s,;]+(?:trace_?id|span_?id|request_?id|x-request-id)[=:].*$", re.I | re.S)


def is_verified(invocation: ToolInvocation) -> bool:
    """A call whose result may be stated as a fact: READY, evidence-bearing, found or not found."""
    return (
        invocation.lifecycle == "READY"
        and invocation.tool_name in EVIDENCE_TOOLS
        and invocation.evidence_status in VERIFIED_STATUSES
        and bool((invocation.agent_result or "").strip())
    )


def _bounded(text: str, limit: int = MAX_FACT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _refs(invocation: ToolInvocation) -> dict[str, str]:
    details = invocation.retrieval_details
    return {ref.raw_path: ref.text for ref in details.evidence_refs} if details else {}


def _window(data: dict[str, Any]) -> str:
    start, end = str(data.get("start") or ""), str(data.get("end") or "")
    return f"在 {start} 至 {end} 期间" if start and end else "在查询窗口内"


def _metrics_fact(data: dict[str, Any], refs: dict[str, str]) -> str | None:
    service, window = str(data.get("service") or ""), _window(data)
    series = [s for s in data.get("series") or [] if isinstance(s, dict)]
    if not series:
        return no_series_text(service, str(data.get("start") or ""), str(data.get("end") or ""), data.get("absent"))
    anomalous: dict[int, float] = {}
    for i, item in enumerate(series):
        values = [float(point[1]) for point in item.get("points") or [] if isinstance(point, list) and len(point) == 2]
        assessment = assess_series(str(item.get("metric", "")), str(item.get("unit", "")), values)
        if assessment.anomaly is not None:
            anomalous[i] = assessment.anomaly.score
    # The most anomalous series; without any anomaly, the first one shows what was read.
    order = sorted(anomalous, key=lambda i: (-anomalous[i], i))[:MAX_SERIES_NAMED] or list(range(len(series)))
    head = f"已查询 {service} {window}的 {len(series)} 个指标序列："
    named: list[str] = []
    for i in order:
        match = _SERIES_SUMMARY.search(refs.get(f"series[{i}].summary", ""))
        if match is not None:
            part = f"{series[i].get('metric')} 最高 {match['max']}（{match['max_at']}），中位数 {match['median']}"
            if named and len(head + "；".join([*named, part])) + 1 > MAX_FACT_CHARS:
                break  # a whole value or none: never a number cut in half
            named.append(part)
        if len(named) >= MAX_SERIES_NAMED or (named and not anomalous):
            break
    if not named:
        return None
    return head + "；".join(named) + "。"


def _logs_fact(data: dict[str, Any], refs: dict[str, str]) -> str | None:
    service, window = str(data.get("service") or ""), _window(data)
    levels = "/".join(str(level) for level in data.get("level") or [])
    contains = data.get("contains")
    what = " ".join(part for part in (f"包含「{contains}」的" if contains else "", levels) if part)
    what = f" {what} " if what else ""
    total = data.get("total_matches")
    hits = [h for h in data.get("hits") or [] if isinstance(h, dict)]
    if not hits:
        return f"{service} {window}没有匹配的{what}日志（0 条）。"
    clusters = cluster_hits(hits)
    index = clusters[0].hit_indexes[0] if clusters else 0
    match = _HIT.match(refs.get(f"hits[{index}]", ""))
    if match is None:
        return None
    message = _ID_FIELD.sub("", _LOG_PREFIX.sub("", match["message"])).strip()
    message = _bounded(message, MAX_MESSAGE_CHARS)
    count = f"{total} 条" if isinstance(total, int) and not isinstance(total, bool) else f"{len(hits)} 条"
    return f"{service} {window}有 {count}匹配的{what}日志，例如：「{message}」。"


def _changes_fact(data: dict[str, Any], refs: dict[str, str]) -> str | None:
    service, window = str(data.get("service") or "所有服务"), _window(data)
    changes = data.get("changes") or []
    if not changes:
        return f"{service} {window}没有变更记录（0 条）。"
    text = refs.get(f"changes[{len(changes) - 1}]")
    if not text:
        return None
    return f"{service} {window}有 {len(changes)} 条变更记录，其中：{_bounded(text, MAX_CHANGE_CHARS)}。"


def _knowledge_fact(data: dict[str, Any], deduped: bool) -> str | None:
    query = _bounded(str(data.get("query") or ""), 40)
    docs = [d for d in data.get("docs") or [] if isinstance(d, dict)]
    fresh = [d for d in docs if any(isinstance(c, dict) and c.get("deduped") is not True for c in d.get("chunks") or [])]
    if deduped or (docs and not fresh):
        return f"知识库检索「{query}」没有新结果（命中内容此前已返回）。"
    if not fresh:
        return f"知识库检索「{query}」没有命中文档。"
    title = _bounded(str(fresh[0].get("title") or fresh[0].get("path") or ""), 40)
    return f"知识库检索「{query}」返回 {len(fresh)} 篇参考文档（如《{title}》），仅供排查参考。"


def observed_fact(invocation: ToolInvocation) -> str | None:
    """The sentence for one verified invocation; None for anything that is no verified evidence
    or whose record does not read as its tool's documented format."""
    if not is_verified(invocation):
        return None
    try:
        data = json.loads(invocation.agent_result or "")
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("tool") != invocation.tool_name:
        return None
    refs = _refs(invocation)
    try:
        if invocation.tool_name == "query_metrics":
            fact = _metrics_fact(data, refs)
        elif invocation.tool_name == "query_logs":
            fact = _logs_fact(data, refs)
        elif invocation.tool_name == "query_changes":
            fact = _changes_fact(data, refs)
        else:
            deduped = bool(invocation.retrieval_details and invocation.retrieval_details.deduped)
            fact = _knowledge_fact(data, deduped)
    except (TypeError, ValueError, KeyError, IndexError):
        return None  # a record that does not read as documented states nothing
    return _bounded(fact) if fact else None
