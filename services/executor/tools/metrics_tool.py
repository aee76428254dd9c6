"""`query_metrics`: metric series of one service over a window, one evidence ref per point.

raw_path conventions (relative to this invocation's evidence_refs):
- `series[i].points[j]` — text `<service> <metric>=<value with unit> at <ts>`
- `series[i].summary`   — text `<service> <metric> <start>..<end>: <n> points, min=…, median=…, max=… at <ts>`
- `series[i].onset`     — only for a series with a change point (`shared.change_point`): text
  `<service> <metric> onset at <ts>: rising|falling from <level before> (median before) to <level after> (median after)`;
  the projection's `series[i].onset` holds {index, at, direction, before, after}
- `series[i].end`       — only when that change ended inside the window (`shared.change_point.find_end`):
  text `<service> <metric> back at <ts>: <level> (median since) after <level during> (median during)`;
  the projection's `series[i].end` holds {index, at, level}. A change without an end is ongoing.
- `series[i].top`       — only for a series combined over instances (Prometheus): text
  `<service> <metric> top <label>=<value>: <its value> at <ts> (highest of <n> instances at the peak)`;
  the projection's `series[i].top` holds {label, value, at, level, instances}
- `summary`             — text `query_metrics service=<s> metric=<m|*> <start>..<end>: <n> series, <p> points`
  and, when some were not examined, `; <k> more series not examined: <names…>`; for a service
  without any series (a backend that lists its label values), `; Prometheus has no series with
  <label>=<service> in this window` and either ` (it has some outside it)` or ` (close values: …)`
  (the projection's `absent`: {backend, label, elsewhere, close_values})
A result without any point is NO_EVIDENCE and carries only the `summary` ref.

Series are shown golden signals first (a backend's `signal`, in its order), then the others by
how anomalous they are (`metric_anomaly.assess_series`), at most MAX_SERIES; the rest are named
as not examined, never dropped silently.
"""

from __future__ import annotations

import json
import math
import statistics

from services.executor.metric_anomaly import assess_series
from services.executor.service_catalogue import suggestions_for
from services.executor.tools.backends import BackendError, MetricsBackend, MetricSeries
from services.executor.tools.tool_result import (
    ToolResult,
    bounded_scope,
    bounded_text,
    iso_utc,
)
from services.executor.tools.value_format import format_value
from shared.change_point import find_end, find_onset
from shared.contracts import EvidenceRef
from shared.core.tool_catalogue import QUERY_METRICS as TOOL_NAME
from shared.core.tool_catalogue import QueryMetricsArguments

DESCRIPTION = (
    "Metric time series of one service between start and end (all of its metrics, or one). "
    "Each point is an evidence ref addressed as series[i].points[j]; each series also has a "
    "series[i].summary ref with min/median/max."
)
MAX_SERIES = 12
MAX_POINTS_PER_SERIES = 240
MAX_UNEXAMINED_NAMES = 8
# The share of the larger level a change point must shift by (services/executor/metric_anomaly.py
# uses the same value, so the anomaly's onset and this ref agree).
ONSET_MIN_RELATIVE = 0.1


def _effective_step(args: QueryMetricsArguments) -> int:
    """Raise the step so that no series exceeds MAX_POINTS_PER_SERIES points."""
    window = (args.end - args.start).total_seconds()
    return max(args.step_seconds, math.ceil(window / MAX_POINTS_PER_SERIES))


def _series_summary(service: str, series: MetricSeries, start: str, end: str) -> tuple[dict, str]:
    values = [value for _, value in series.points]
    peak_index = max(range(len(values)), key=lambda k: values[k])
    stats = {
        "count": len(values),
        "min": min(values),
        "median": statistics.median(values),
        "max": values[peak_index],
        "max_at": iso_utc(series.points[peak_index][0]),
    }
    unit = series.unit
    text = (
        f"{service} {series.metric} {start}..{end}: {len(values)} points, "
        f"min={format_value(stats['min'], unit)}, median={format_value(stats['median'], unit)}, "
        f"max={format_value(stats['max'], unit)} at {stats['max_at']}"
    )
    return stats, text


def _series_onset(
    service: str, series: MetricSeries, stamps: list[str]
) -> tuple[dict, str, tuple[dict, str] | None] | None:
    """The series' change point as the projection's `onset` and its ref text, with its end (the
    projection's `end` and its ref text) when it ended in the window; None without a change."""
    values = [value for _, value in series.points]
    change = find_onset(values, min_relative=ONSET_MIN_RELATIVE)
    if change is None:
        return None
    unit = series.unit
    onset = {
        "index": change.index,
        "at": stamps[change.index],
        "direction": change.direction,
        "before": change.before,
        "after": change.after,
    }
    verb = "rising" if change.direction == "up" else "falling"
    text = (
        f"{service} {series.metric} onset at {onset['at']}: {verb} from {format_value(change.before, unit)} "
        f"(median before) to {format_value(change.after, unit)} (median after)"
    )
    end_index = find_end(values, change)
    if end_index is None:
        return onset, text, None
    level = statistics.median(values[end_index:])
    end = {"index": end_index, "at": stamps[end_index], "level": level}
    end_text = (
        f"{service} {series.metric} back at {end['at']}: {format_value(level, unit)} (median since) "
        f"after {format_value(change.after, unit)} (median during)"
    )
    return onset, text, (end, end_text)


def _top(service: str, series: MetricSeries) -> tuple[dict, str] | None:
    top = series.top
    if top is None:
        return None
    at = iso_utc(top.at)
    item = {"label": top.label, "value": top.value, "at": at, "level": top.level, "instances": top.instances}
    text = (
        f"{service} {series.metric} top {top.label}={top.value}: {format_value(top.level, series.unit)} at {at} "
        f"(highest of {top.instances} instances at the peak)"
    )
    return item, text


def no_series_text(service: str, start: str, end: str, absent: object) -> str:
    """What a call without any series says, in the answer's words: which label of which backend
    had no such value, and the close values it holds (or that it has series outside the window)."""
    window = f"在 {start} 至 {end} 期间" if start and end else "在查询窗口内"
    text = f"未查询到 {service} {window}的指标数据（0 series）"
    if not isinstance(absent, dict) or not absent.get("label"):
        return text + "。"
    text += f"：{absent.get('backend') or '指标后端'} 中没有 {absent['label']}={service} 的序列"
    if absent.get("elsewhere"):
        return text + "（此时间窗口之外有，可调整时间范围）。"
    close = [str(value) for value in absent.get("close_values") or []]
    return text + (f"，相近的标签值：{'、'.join(close)}。" if close else "，也没有相近的标签值。")


def _absent(backend: MetricsBackend, service: str) -> dict | None:
    """For a service without any series: which label was asked, whether the service has series
    outside the window, and the label values closest to its name (a backend that can list them)."""
    listing = getattr(backend, "label_values", None)
    if not callable(listing):
        return None
    try:
        label, values = listing()
    except BackendError:
        return None
    return {
        "backend": backend.source_name.split(":", 1)[0].capitalize(),
        "label": label,
        "elsewhere": service in values,
        "close_values": [] if service in values else suggestions_for(service, values),
    }


def _ordered(series: list[MetricSeries]) -> list[MetricSeries]:
    """Golden signals in the backend's order, then the others, most anomalous first."""
    def anomaly_score(s: MetricSeries) -> float:
        anomaly = assess_series(s.metric, s.unit, [value for _, value in s.points]).anomaly
        return anomaly.score if anomaly is not None else 0.0

    golden = [s for s in series if s.signal]
    others = sorted((s for s in series if not s.signal), key=lambda s: (-anomaly_score(s), s.metric))
    return golden + others


def query_metrics(backend: MetricsBackend, args: QueryMetricsArguments) -> ToolResult:
    step = _effective_step(args)
    step_for = getattr(backend, "step_for", None)
    if callable(step_for):
        step = step_for(step)  # the step the backend answers at is the one recorded
    start, end = iso_utc(args.start), iso_utc(args.end)
    fetched = backend.query_range(args.service, args.metric, args.start, args.end, step)
    ordered = _ordered([s for s in fetched if s.examined and s.points])
    series_list = ordered[:MAX_SERIES]
    not_examined = [s.metric for s in ordered[MAX_SERIES:]] + [s.metric for s in fetched if not s.examined]
    truncated = bool(not_examined)
    scope = bounded_scope(
        tool=TOOL_NAME, service=args.service, metric=args.metric, start=args.start, end=args.end,
        step_seconds=step,
    )

    refs: list[EvidenceRef] = []
    projected: list[dict] = []
    point_count = 0

    def add_ref(path: str, text: str, stamp: str) -> None:
        refs.append(EvidenceRef(raw_path=path, text=bounded_text(text), source=backend.source_name, timestamp=stamp))

    for i, series in enumerate(series_list):
        points = series.points[-MAX_POINTS_PER_SERIES:]
        stamps = [iso_utc(ts) for ts, _ in points]
        for j, ((_, value), stamp) in enumerate(zip(points, stamps)):
            add_ref(f"series[{i}].points[{j}]", f"{args.service} {series.metric}={format_value(value, series.unit)} at {stamp}", stamp)
        point_count += len(points)
        bounded_series = MetricSeries(series.metric, series.unit, points, series.signal, series.query, series.top)
        stats, summary_text = _series_summary(args.service, bounded_series, start, end)
        add_ref(f"series[{i}].summary", summary_text, end)
        item = {
            "metric": series.metric,
            "unit": series.unit,
            "points": [[stamp, value] for stamp, (_, value) in zip(stamps, points)],
            "summary": stats,
        }
        if series.signal:
            item["signal"] = series.signal
        if series.query:
            item["query"] = bounded_text(series.query)
        onset = _series_onset(args.service, bounded_series, stamps)
        if onset is not None:
            item["onset"] = onset[0]
            add_ref(f"series[{i}].onset", onset[1], onset[0]["at"])
            if onset[2] is not None:
                item["end"] = onset[2][0]
                add_ref(f"series[{i}].end", onset[2][1], onset[2][0]["at"])
        top = _top(args.service, series)
        if top is not None:
            item["top"] = top[0]
            add_ref(f"series[{i}].top", top[1], top[0]["at"])
        projected.append(item)

    metric_label = args.metric or "*"
    summary = (
        f"{TOOL_NAME} service={args.service} metric={metric_label} {start}..{end}: "
        f"{len(series_list)} series, {point_count} points"
    )
    absent = _absent(backend, args.service) if not fetched and args.metric is None else None
    if absent is not None:
        summary += f"; {absent['backend']} has no series with {absent['label']}={args.service} in this window"
        if absent["elsewhere"]:
            summary += " (it has some outside it)"
        elif absent["close_values"]:
            summary += f" (close values: {', '.join(absent['close_values'])})"
    if not_examined:
        names = ", ".join(not_examined[:MAX_UNEXAMINED_NAMES]) + ("…" if len(not_examined) > MAX_UNEXAMINED_NAMES else "")
        summary += f"; {len(not_examined)} more series not examined: {names}"
    add_ref("summary", summary, end)
    agent_result = {
        "tool": TOOL_NAME,
        "service": args.service,
        "metric": args.metric,
        "start": start,
        "end": end,
        "step_seconds": step,
        "series": projected,
        "series_truncated": truncated,
        "not_examined": {"count": len(not_examined), "names": not_examined[:MAX_UNEXAMINED_NAMES]},
        **({"absent": absent} if absent is not None else {}),
        "summary": summary,
    }
    return ToolResult(
        tool_name=TOOL_NAME,
        evidence_status="EVIDENCE_FOUND" if point_count else "NO_EVIDENCE",
        agent_result=json.dumps(agent_result, ensure_ascii=False, separators=(",", ":")),
        evidence_refs=refs,
        request_scope=scope,
    )
