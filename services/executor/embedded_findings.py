"""The embedded executor agent's findings and what every reader of a tool result shares: the
candidate claims (`Candidate`), the change records and runbook hits read, the `Findings` a run
collects, and the helpers that cite a ref, load a stored result and read a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

from shared.core.contracts import (
    EvidenceBinding,
    MissingInfo,
    Quantity,
    Signal,
    SignalKind,
    Statement,
    StatementRef,
    TimeWindow,
    ToolInvocation,
)
from shared.core.evidence_view import evidence_view
from shared.core.signal_semantics import Direction
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE, QUERY_CHANGES, QUERY_LOGS, QUERY_METRICS
from shared.core.tool_results import ChangesResult, LogsResult, MetricsResult, ToolResultData, read_result

# Which of the lines that start with an anomaly is its cause: the most severe first.
SEVERITY = {"FATAL": 0, "ERROR": 1, "WARN": 2}
_R = TypeVar("_R", bound=ToolResultData)

SOURCE_TYPES = {QUERY_METRICS: "metrics", QUERY_LOGS: "logs", LOOKUP_KNOWLEDGE: "knowledge", QUERY_CHANGES: "changes"}
# `<service> <metric>=<value with unit> at <ts>` (tools/metrics_tool.py)
# `<ts> <LEVEL> <service> host=<host> <message>` (tools/logs_tool.py)


@dataclass
class Candidate:
    kind: str  # anomaly | log_cluster | event | negative | change | cause
    service: str
    text: str
    bindings: list[EvidenceBinding]
    score: float
    symptoms: set[str] = field(default_factory=set)
    metric: str = ""
    onset_ts: str | None = None
    first_ts: str | None = None
    level: str = ""
    excerpt: str = ""
    preferred_negative: int = 9  # lower is a better stand-in for "this service looks normal"
    no_hit: bool = False
    related: Candidate | None = None  # change candidates: the anomaly whose onset they precede
    minutes_before: float = 0.0
    # log clusters: the first line; events: the line (invocation, raw_path, text)
    signature: tuple[ToolInvocation, str, str] | None = None
    template: str = ""  # log clusters and events: the lines' template (shared/log_templates.py)
    onset_ref: tuple[ToolInvocation, str, str] | None = None  # anomalies: the series' onset ref
    moved: str = "升高"  # anomalies: how the series moved the bad way (升高, or 下降 for a fall)
    support: str = "direct"
    link_token: str = ""  # change causes: the distinctive token the change shares with the signatures
    already_high: bool = False  # anomalies: the series was already high where the window starts
    change_linked: bool = False  # causes: a change linked by the link check (rollback advice may follow)
    decisive: str = ""  # log clusters: the part of the first line that says what went wrong (a cause's quote)
    statement: Statement | None = None  # what the candidate says, typed; its text is rendered from it


@dataclass(frozen=True)
class ChangeEntry:
    invocation: ToolInvocation
    raw_path: str
    ref_text: str
    ts: datetime
    stamp: str
    service: str
    kind: str
    author: str
    summary: str


@dataclass(frozen=True)
class RunbookHit:
    title: str
    path: str
    kind: str
    heading: str
    text: str


@dataclass
class Findings:
    candidates: list[Candidate] = field(default_factory=list)
    missing: list[MissingInfo] = field(default_factory=list)
    queried_tools: set[str] = field(default_factory=set)
    changes: list[ChangeEntry] = field(default_factory=list)
    changes_checked: set[str] = field(default_factory=set)  # services whose change records were read
    runbooks: list[RunbookHit] = field(default_factory=list)  # best first
    # service -> (ts, message) of the log lines read so far, and of those an error cluster reports
    read_lines: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    reported_lines: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    levels_read: dict[str, set[str]] = field(default_factory=dict)  # service -> levels a read asked for in full
    levels_read_from: dict[str, datetime] = field(default_factory=dict)  # service -> where those reads start
    # Error/warn clusters too small to report: a change that names what one names is linked by it.
    link_signatures: list[Candidate] = field(default_factory=list)
    # Signal kind -> the direction the question says it moved (「命中率为什么降了」): series of
    # that kind are assessed in that direction (the question intent's `stated_directions`).
    stated: dict[str, Direction] = field(default_factory=dict)


def binding(invocation: ToolInvocation, raw_path: str, excerpt: str) -> EvidenceBinding:
    return EvidenceBinding(
        source_type=SOURCE_TYPES.get(invocation.tool_name, invocation.tool_name),
        tool_name=invocation.tool_name,
        source_invocation_id=invocation.invocation_id,
        source_invocation_ids=[invocation.invocation_id],
        raw_path=raw_path,
        evidence_excerpt=excerpt,
    )


def ref_texts(invocation: ToolInvocation) -> dict[str, str]:
    return {ref.raw_path: ref.text for ref in evidence_view(invocation).cited_refs()}


_NEVER = datetime.min.replace(tzinfo=UTC)


def sort_ts(text: str | None) -> datetime:
    """A candidate's time as a sort key (the candidates sorted by it were chosen for having one)."""
    return parse_ts(text or "") or _NEVER


def parse_ts(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None


def scope_label(invocation: ToolInvocation) -> str:
    service = invocation.request.get("service")
    return f"{invocation.tool_name}（service={service}）" if service else invocation.tool_name


def read_scope(invocation: ToolInvocation, data: MetricsResult | LogsResult | ChangesResult) -> tuple[str, str, str]:
    """The service a read is about (its result's, else its request's) and its window's ends."""
    return data.service or str(invocation.request.get("service") or ""), data.start or "", data.end or ""


def service_onsets(candidates: list[Candidate]) -> dict[str, datetime]:
    """service -> the earliest onset of its metric anomalies, else its first ERROR/FATAL line."""
    onsets: dict[str, datetime] = {}
    for candidate in candidates:
        if candidate.kind == "anomaly":
            at = parse_ts(candidate.onset_ts or "")
            if at is not None and (candidate.service not in onsets or at < onsets[candidate.service]):
                onsets[candidate.service] = at
    errors: dict[str, datetime] = {}
    for candidate in candidates:
        if candidate.kind == "log_cluster" and candidate.level.upper() in ("ERROR", "FATAL") and candidate.service not in onsets:
            at = parse_ts(candidate.first_ts or "")
            if at is not None and (candidate.service not in errors or at < errors[candidate.service]):
                errors[candidate.service] = at
    return {**onsets, **errors}


def load_result(invocation: ToolInvocation, findings: Findings, kind: type[_R]) -> _R | None:
    """The call's stored result, typed; a result off its schema is named as not analysed."""
    data = read_result(invocation.tool_name, invocation.agent_result)
    if not isinstance(data, kind):
        findings.missing.append(MissingInfo(
            text=f"{scope_label(invocation)} 的结果无法解析，未纳入分析。", tool_name=invocation.tool_name
        ))
        return None
    return data


def change_statement(invocation: ToolInvocation, raw_path: str, service: str, kind: str, at: str, author: str) -> Statement:
    """What a change record says, typed: the service changed, the change's kind, its instant and who
    made it, citing the record."""
    return Statement(subject=service, signal=Signal(kind="change", name=kind), state="event", at=at, actor=author,
                     refs=[StatementRef(source_invocation_id=invocation.invocation_id, raw_path=raw_path)])


def nothing_found(invocation: ToolInvocation, service: str, kind: SignalKind, start: str, end: str, *,
                  words: str = "", levels: str = "") -> Statement:
    """A search that found nothing, typed: the service, what was searched for (lines with `words`
    at `levels`, or change records), none over its window; citing the search's summary."""
    return Statement(subject=service, signal=Signal(kind=kind, name=words, level=levels), state="absent",
                     quantities=[Quantity(value=0, unit="count", aggregate="count",
                                          window=TimeWindow(start=start, end=end))],
                     refs=[StatementRef(source_invocation_id=invocation.invocation_id, raw_path="summary")])
