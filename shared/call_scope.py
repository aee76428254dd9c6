"""The scope of a persisted tool request in our words (the answer's 已核实的数据来源 and its
failed-call lines): read from the stored request, never from model text."""

from __future__ import annotations

import re
from typing import Any

from shared.core.tool_catalogue import QUERY_LOGS, QUERY_METRICS
from shared.core.tool_results import MetricsResult, read_result

_SCOPE_VALUE = re.compile(r"[A-Za-z0-9._:/@+-]{1,120}")


UNEXAMINED = "未检查序列"


def unexamined_series(agent_result: str | None) -> int:
    """How many series a stored metrics result says it did not examine (0 for any other result)."""
    if not agent_result or (QUERY_METRICS not in agent_result and "\\u" not in agent_result):
        return 0  # not a metrics result (its tool is named in it, or spelled with escapes): no parse to fail
    data = read_result(QUERY_METRICS, agent_result)
    return data.not_examined.count if isinstance(data, MetricsResult) else 0


def call_scope(request: dict[str, Any], unexamined: int = 0) -> str:
    """The scope of a persisted tool request in our words: service, metric (全部指标 when a metrics
    query named none), log levels, change kind, time window, and how many series a metrics call
    left unexamined (`未检查序列 N`, from its stored result). Only values of a safe shape; log
    levels only from the fixed list (the request may hold them as a list or its text)."""
    def value(key: str) -> str | None:
        item = request.get(key)
        return item if isinstance(item, str) and _SCOPE_VALUE.fullmatch(item) else None

    parts = []
    if service := value("service"):
        parts.append(f"服务 {service}")
    if metric := value("metric"):
        parts.append(f"指标 {metric}")
    elif request.get("tool") == QUERY_METRICS:
        parts.append("全部指标")
    raw_levels = request.get("level")
    words = re.findall(r"[A-Za-z]+", " ".join(map(str, raw_levels)) if isinstance(raw_levels, list) else str(raw_levels or ""))
    known = ("DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL", "CRITICAL")
    levels = [w.upper() for w in dict.fromkeys(words) if w.upper() in known]
    if levels:
        parts.append(f"级别 {'/'.join(levels)}")
    elif request.get("tool") == QUERY_LOGS:
        parts.append("全部级别")
    if kind := value("kind"):
        parts.append(f"变更类型 {kind}")
    start, end = value("start"), value("end")
    if start and end:
        parts.append(f"{start} 至 {end}")
    if unexamined > 0:
        parts.append(f"{UNEXAMINED} {int(unexamined)}")
    return "，".join(parts)
