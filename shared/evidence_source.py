"""Where a fact came from, and which tools had no source at all.

Every backend names itself in its evidence refs' `source` (`prometheus:<url>`, `loki:<url>`,
`estate-sql:<table>`, `changes-sql:<table>`, `knowledge:<dir>`, `demo-knowledge:<dir>`). The answer
names the kind only, in our words: never the URL (it may carry a host or a tenant the reader need
not see), never a credential. The demo estate and the demo knowledge directory are labelled as
demo data, so nobody reads an invented incident as their own.

A disabled tool (a real backend is configured, but not for this tool, and the demo source was not
chosen for it) is no failure: the answer's scope says the source is not configured, and the
verdict is not capped for it (a failed call is: `shared/failed_calls.py`).
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.core.contracts import EvidenceRef, ToolInvocation
from shared.core.evidence_view import evidence_view
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE, QUERY_CHANGES, QUERY_LOGS, QUERY_METRICS

# source-name prefix -> kind
_PREFIX_KIND = {
    "prometheus": "prometheus",
    "loki": "loki",
    "estate-sql": "estate",
    "changes-sql": "changes_db",
    "knowledge": "knowledge_dir",
    "demo-knowledge": "demo_knowledge",
}
SOURCE_KIND_LABEL = {
    "prometheus": "Prometheus",
    "loki": "Loki",
    "estate": "演示数据库 estate（内置演示数据，非真实环境）",
    "changes_db": "变更记录库",
    "knowledge_dir": "知识库目录",
    "demo_knowledge": "演示知识库（内置演示文档，非真实记录）",
}
# Inside a fact's citation: short, still saying what is demo data.
SOURCE_KIND_SHORT = {
    "prometheus": "Prometheus",
    "loki": "Loki",
    "estate": "演示数据 estate",
    "changes_db": "变更记录库",
    "knowledge_dir": "知识库目录",
    "demo_knowledge": "演示知识库",
}
# What a disabled tool lacks, in the answer's scope.
DISABLED_LINE = {
    QUERY_METRICS: "未配置指标源（query_metrics 未启用），本回答不包含指标数据",
    QUERY_LOGS: "未配置日志源（query_logs 未启用），本回答不包含日志数据",
    QUERY_CHANGES: "未配置变更记录源（query_changes 未启用），本回答不包含变更记录",
    LOOKUP_KNOWLEDGE: "未配置知识库（lookup_knowledge 未启用），本回答不参考运行手册与历史事件",
}


def source_kind(source: str) -> str | None:
    """The kind of a backend's source name, e.g. `prometheus:http://…` -> `prometheus`."""
    prefix, sep, _ = source.partition(":")
    return _PREFIX_KIND.get(prefix.strip()) if sep else None


def refs_source_kind(refs: Iterable[EvidenceRef]) -> str | None:
    """The kind of one invocation's evidence: the summary ref's source first (a knowledge hit's own
    ref names its document, not the backend), else the first ref whose source has a kind."""
    refs = list(refs)
    ordered = [r for r in refs if r.raw_path == "summary"] + [r for r in refs if r.raw_path != "summary"]
    return next((kind for ref in ordered if (kind := source_kind(ref.source))), None)


def invocation_source_kind(invocation: ToolInvocation) -> str | None:
    """`refs_source_kind` of an invocation's evidence view, rendering its whole list only when
    the summary ref's source names no kind."""
    view = evidence_view(invocation)
    return refs_source_kind(view.at("summary")) or refs_source_kind(view.refs())


def source_label(kind: str, short: bool = False) -> str:
    """The kind in our words ("" for an unknown kind)."""
    return (SOURCE_KIND_SHORT if short else SOURCE_KIND_LABEL).get(kind, "")


def disabled_lines(tools: Iterable[str]) -> list[str]:
    """One line per disabled evidence tool, in our words; an unknown name is left out."""
    return [DISABLED_LINE[tool] for tool in dict.fromkeys(tools) if tool in DISABLED_LINE]
