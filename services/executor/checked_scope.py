"""What the embedded single-ReAct agent checked, as Analyses and as the scope of its answer
(healthy is an answer).

A Draft that says 「在所查范围内未发现异常」 must say what that range was and show each part of it:

- `checked_items`: one item per check the derived findings left unstated, in our own words from
  the call's canonical record (its projection and evidence ref texts, never model text):
  - a metric series the executor's anomaly test (`metric_anomaly.assess_series`) reads as quiet
    over the window, with its maximum and median (its minimum and median for a signal whose fall
    is the trouble: a hit ratio, free bytes); a series with an anomaly or too few points is
    never stated here: the findings carry the former, the limitations the latter;
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

from dataclasses import dataclass

from services.executor.embedded_findings import change_statement, nothing_found
from services.executor.log_clusters import cluster_hits
from services.executor.tools.metrics_tool import no_series_text
from shared.core.contracts import (
    Quantity,
    QuantityAggregate,
    Signal,
    Statement,
    StatementRef,
    TimeWindow,
    ToolInvocation,
)
from shared.core.evidence_facts import normalise_unit
from shared.core.metric_anomaly import assess_series
from shared.core.signal_semantics import Direction
from shared.core.statement_render import render_statement
from shared.core.symptom_lexicon import metric_profile
from shared.core.tool_results import (
    ChangesResult,
    LogsResult,
    MetricSeriesResult,
    MetricsResult,
    ToolResultData,
    read_result,
)
from shared.core.value_format import as_written

MAX_SERIES_ITEMS = 8  # quiet series stated per metrics call
MAX_CHANGE_ITEMS = 3  # change records stated per changes call
MAX_SCOPE_SERVICES = 4
MAX_SCOPE_METRICS = 6
MAX_QUOTE_CHARS = 100

READING = "reading"  # a state that is neither an anomaly nor a quiet signal (routine log lines)
NORMAL_STATE, CHANGE_STATE = "normal", "change"


@dataclass(frozen=True)
class CheckedItem:
    text: str
    tool_call_id: str
    state: str  # NORMAL_STATE (quiet series, no-hit), CHANGE_STATE, READING
    negative: bool  # the call found nothing: a NEGATIVE_OBSERVATION


def _ready(invocation: ToolInvocation) -> ToolResultData | None:
    if invocation.lifecycle != "READY" or invocation.evidence_status not in ("EVIDENCE_FOUND", "NO_EVIDENCE"):
        return None
    return read_result(invocation.tool_name, invocation.agent_result)


def _levels(data: LogsResult) -> str:
    return "/".join(data.level or [])


def _service(data: ToolResultData, invocation: ToolInvocation) -> str:
    own = data.service if isinstance(data, (MetricsResult, LogsResult, ChangesResult)) else ""
    return own or str(invocation.request.get("service") or "")


def _window(data: ToolResultData) -> tuple[str, str]:
    return (data.start or "", data.end or "") if isinstance(data, (MetricsResult, LogsResult, ChangesResult)) else ("", "")


def quiet_series_statement(invocation: ToolInvocation, index: int, service: str, series: MetricSeriesResult,
                           start: str, end: str, direction: Direction | None = None) -> Statement | None:
    """What the series' summary (`series[index].summary`) says of a quiet series: over the window,
    its highest value (with its instant) and its median, normal. A signal whose fall is the trouble
    (its bad direction, or `direction` when the question states one) states its lowest value and
    its median instead: its highest says nothing of it. Rendered: 「svc 的 m 在 … 至 … 期间最高为 X
    （t），中位数为 Y，未见明显升高」."""
    stats = series.summary
    if stats is None:
        return None
    unit, factor = normalise_unit(series.unit) or ("", 1.0)
    window = TimeWindow(start=start, end=end)

    def quantity(value: float, aggregate: QuantityAggregate, at: str = "") -> Quantity:
        stated, precision = as_written(value, series.unit, factor)
        return Quantity(value=stated, unit=unit, aggregate=aggregate, at=at, window=window, precision=precision)

    down = (direction or metric_profile(series.metric, series.unit).bad_direction) == "down"
    extreme = quantity(stats.min, "min") if down else quantity(stats.max, "max", stats.max_at or "")
    return Statement(subject=service, signal=Signal(kind="metric", name=series.metric), state="normal",
                     quantities=[extreme, quantity(stats.median, "median")],
                     refs=[StatementRef(source_invocation_id=invocation.invocation_id, raw_path=f"series[{index}].summary")])


def _quiet(series: MetricSeriesResult) -> bool:
    assessment = assess_series(series.metric, series.unit, series.values)
    return not assessment.insufficient and assessment.anomaly is None


def quiet_metrics(invocation: ToolInvocation) -> list[str]:
    """The metrics of a metrics call that the anomaly test reads as quiet (enough points, no rise)."""
    data = _ready(invocation)
    if not isinstance(data, MetricsResult):
        return []
    return [series.metric for series in data.series if _quiet(series)]


def checked_items(invocations: list[ToolInvocation], stated: dict[str, list[str]]) -> list[CheckedItem]:
    """Items for the checks `stated` (tool_call_id -> the texts of Analyses citing it) leaves out."""
    items: list[CheckedItem] = []
    for invocation in invocations:
        data = _ready(invocation)
        if data is None:
            continue
        said = stated.get(invocation.tool_call_id, [])
        negative = invocation.evidence_status == "NO_EVIDENCE"
        service = _service(data, invocation)
        start, end = _window(data)
        if isinstance(data, MetricsResult):
            if negative:
                if not said:
                    items.append(CheckedItem(no_series_text(service, start, end, data.absent),
                                             invocation.tool_call_id, NORMAL_STATE, True))
                continue
            count = 0
            for index, series in enumerate(data.series):
                if not _quiet(series) or any(series.metric in text for text in said) or count >= MAX_SERIES_ITEMS:
                    continue
                statement = quiet_series_statement(invocation, index, service, series, start, end)
                if statement is None:
                    continue
                items.append(CheckedItem(render_statement(statement, None) + "。", invocation.tool_call_id,
                                         NORMAL_STATE, False))
                count += 1
        elif said:
            continue  # the findings already state what this call showed
        elif isinstance(data, LogsResult):
            if negative:
                statement = nothing_found(invocation, service, "log", start, end, words=data.contains or "",
                                          levels=_levels(data))
                items.append(CheckedItem(render_statement(statement, None) + "。", invocation.tool_call_id,
                                         NORMAL_STATE, True))
            else:
                text = _log_reading(data, service, start, end)
                if text:
                    items.append(CheckedItem(text, invocation.tool_call_id, READING, False))
        elif isinstance(data, ChangesResult):
            if negative:
                if service:
                    statement = nothing_found(invocation, service, "change", start, end)
                    items.append(CheckedItem(render_statement(statement, None) + "。", invocation.tool_call_id,
                                             NORMAL_STATE, True))
                continue
            for k, change in enumerate(data.changes[:MAX_CHANGE_ITEMS]):
                if not change.ts:
                    continue
                statement = change_statement(invocation, f"changes[{k}]", change.service or service, change.kind,
                                             change.ts, change.author or "")
                # The record's own words quoted: 「仅文案，无代码路径变更」 is the record's, not ours.
                items.append(CheckedItem(render_statement(statement, None, quote=change.summary) + "。",
                                         invocation.tool_call_id, CHANGE_STATE, False))
    return items


def _quoted(message: str) -> str:
    """A log message for a quote: whole, or cut before a space or comma (never inside a number)."""
    message = " ".join(message.split())
    if len(message) <= MAX_QUOTE_CHARS:
        return message
    cut = max(message.rfind(" ", 0, MAX_QUOTE_CHARS), message.rfind(",", 0, MAX_QUOTE_CHARS))
    return message[: cut if cut > 0 else MAX_QUOTE_CHARS].rstrip(" ,") + "…"


def _log_reading(data: LogsResult, service: str, start: str, end: str) -> str | None:
    """「svc 在 … 期间有 N 条匹配的 ERROR/WARN 日志，例如：「…」」: what was seen, no judgement."""
    if not data.hits:
        return None
    clusters = cluster_hits(data.hits)
    hit = data.hits[clusters[0].hit_indexes[0] if clusters else 0]
    levels = _levels(data)
    return (f"{service} 在 {start} 至 {end} 期间有 {data.total_matches} 条匹配的{' ' + levels + ' ' if levels else ''}日志"
            f"（最常见的一类为 {hit.level}），例如：「{_quoted(hit.message)}」。")


def scope_text(invocations: list[ToolInvocation], named_metrics: set[str]) -> str:
    """「svc：<start> 至 <end> 的指标 m1、m2，ERROR/WARN 日志，<start> 至 <end> 的变更记录」 per service,
    from the records of the verified calls; only metrics in `named_metrics` (those some cited
    Analysis states) are named."""
    parts: dict[str, list[str]] = {}
    for invocation in invocations:
        data = _ready(invocation)
        if data is None:
            continue
        service = _service(data, invocation)
        if not service:
            continue
        start, end = _window(data)
        window = f"{start} 至 {end} " if start and end else ""
        if isinstance(data, MetricsResult):
            metrics = [s.metric for s in data.series if s.metric in named_metrics][:MAX_SCOPE_METRICS]
            if metrics:
                parts.setdefault(service, []).append(f"{window}的指标 {'、'.join(metrics)}")
        elif isinstance(data, LogsResult):
            levels = _levels(data)
            parts.setdefault(service, []).append(f"{levels} 日志" if levels else "日志")
        elif isinstance(data, ChangesResult):
            parts.setdefault(service, []).append(f"{window}的变更记录")
    shown = list(parts.items())[:MAX_SCOPE_SERVICES]
    text = "；".join(f"{service}：{'，'.join(dict.fromkeys(checks))}" for service, checks in shown)
    return text + ("；等服务" if len(parts) > MAX_SCOPE_SERVICES else "")
