"""One short Chinese sentence per verified tool call: what the check was and what it returned.

These sentences are what the ProgressSnapshot publishes when the single-ReAct agent stops without
a releasable conclusion (spec "Fail-closed release policy": observed facts describe only actual
completed checks). So they are built by the system, never by the agent: only from a READY
invocation of an evidence tool whose evidence status is EVIDENCE_FOUND or NO_EVIDENCE, and only
from its canonical record: its stored result, read with its typed schema (`shared.core.tool_results`).
A sentence states values, never a judgement: no "正常", no cause. Which series or log lines to name reuses the embedded agent's
anomaly and clustering logic (`shared/core/metric_anomaly.py`, `log_clusters.py`).
"""

from __future__ import annotations

import re

from services.executor.log_clusters import cluster_hits
from services.executor.tools.metrics_tool import no_series_text
from shared.core.contracts import EVIDENCE_TOOLS, ToolInvocation
from shared.core.metric_anomaly import assess_series
from shared.core.tool_results import ChangesResult, KnowledgeResult, LogsResult, MetricsResult, read_result, ref_text
from shared.core.value_format import format_value

MAX_FACT_CHARS = 200
MAX_SERIES_NAMED = 2
MAX_MESSAGE_CHARS = 60
MAX_CHANGE_CHARS = 80
VERIFIED_STATUSES = frozenset({"EVIDENCE_FOUND", "NO_EVIDENCE"})

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


def _window(data: MetricsResult | LogsResult | ChangesResult) -> str:
    return f"在 {data.start} 至 {data.end} 期间" if data.start and data.end else "在查询窗口内"


def _metrics_fact(data: MetricsResult) -> str | None:
    service, window = data.service or "", _window(data)
    series = data.series
    if not series:
        return no_series_text(service, data.start or "", data.end or "", data.absent)
    anomalous: dict[int, float] = {}
    for i, item in enumerate(series):
        assessment = assess_series(item.metric, item.unit, item.values)
        if assessment.anomaly is not None:
            anomalous[i] = assessment.anomaly.score
    # The most anomalous series; without any anomaly, the first one shows what was read.
    order = sorted(anomalous, key=lambda i: (-anomalous[i], i))[:MAX_SERIES_NAMED] or list(range(len(series)))
    head = f"已查询 {service} {window}的 {len(series)} 个指标序列："
    named: list[str] = []
    for i in order:
        stats, unit = series[i].summary, series[i].unit
        if stats is not None:
            part = (f"{series[i].metric} 最高 {format_value(stats.max, unit)}（{stats.max_at}），"
                    f"中位数 {format_value(stats.median, unit)}")
            if named and len(head + "；".join([*named, part])) + 1 > MAX_FACT_CHARS:
                break  # a whole value or none: never a number cut in half
            named.append(part)
        if len(named) >= MAX_SERIES_NAMED or (named and not anomalous):
            break
    if not named:
        return None
    return head + "；".join(named) + "。"


def _logs_fact(data: LogsResult) -> str | None:
    service, window = data.service or "", _window(data)
    levels = "/".join(data.level or [])
    what = " ".join(part for part in (f"包含「{data.contains}」的" if data.contains else "", levels) if part)
    what = f" {what} " if what else ""
    if not data.hits:
        return f"{service} {window}没有匹配的{what}日志（0 条）。"
    clusters = cluster_hits(data.hits)
    hit = data.hits[clusters[0].hit_indexes[0] if clusters else 0]
    message = _ID_FIELD.sub("", _LOG_PREFIX.sub("", hit.message)).strip()
    message = _bounded(message, MAX_MESSAGE_CHARS)
    return f"{service} {window}有 {data.total_matches} 条匹配的{what}日志，例如：「{message}」。"


def _changes_fact(data: ChangesResult) -> str | None:
    service, window = data.service or "所有服务", _window(data)
    if not data.changes:
        return f"{service} {window}没有变更记录（0 条）。"
    text = ref_text(data, f"changes[{len(data.changes) - 1}]")
    if not text:
        return None
    return f"{service} {window}有 {len(data.changes)} 条变更记录，其中：{_bounded(text, MAX_CHANGE_CHARS)}。"


def _knowledge_fact(data: KnowledgeResult, deduped: bool) -> str | None:
    query = _bounded(data.query, 40)
    fresh = [doc for doc in data.docs if any(not chunk.deduped for chunk in doc.chunks)]
    if deduped or (data.docs and not fresh):
        return f"知识库检索「{query}」没有新结果（命中内容此前已返回）。"
    if not fresh:
        return f"知识库检索「{query}」没有命中文档。"
    title = _bounded(fresh[0].title or fresh[0].path, 40)
    return f"知识库检索「{query}」返回 {len(fresh)} 篇参考文档（如《{title}》），仅供排查参考。"


def observed_fact(invocation: ToolInvocation) -> str | None:
    """The sentence for one verified invocation; None for anything that is no verified evidence
    or whose stored result does not follow its tool's schema."""
    if not is_verified(invocation):
        return None
    data = read_result(invocation.tool_name, invocation.agent_result)
    if isinstance(data, MetricsResult):
        fact = _metrics_fact(data)
    elif isinstance(data, LogsResult):
        fact = _logs_fact(data)
    elif isinstance(data, ChangesResult):
        fact = _changes_fact(data)
    elif isinstance(data, KnowledgeResult):
        fact = _knowledge_fact(data, bool(invocation.retrieval_details and invocation.retrieval_details.deduped))
    else:
        return None  # a record that does not read as documented states nothing
    return _bounded(fact) if fact else None
