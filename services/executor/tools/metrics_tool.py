"""`query_metrics`: metric series of one service over a window, one evidence ref per point.

raw_path conventions (relative to this invocation's evidence_refs):
- `series[i].points[j]` — text `<service> <metric>=<value with unit> at <ts>`
- `series[i].summary`   — text `<service> <metric> <start>..<end>: <n> points, min=…, median=…, max=… at <ts>`
- `series[i].onset`     — only for a series with a change point (`shared.change_point`): text
  `<service> <metric> onset at <ts>: rising|falling from <level before> (median before) to <level after> (median after)`;
  the projection's `series[i].onset` holds {index, at, direction, before, after}
- `summary`             — text `query_metrics service=<s> metric=<m|*> <start>..<end>: <n> series, <p> points`
A result without any point is NO_EVIDENCE and carries only the `summary` ref.
"""

from __future__ import annotations

import json
import math
import statistics

from pydantic import Field

from services.executor.tools.backends import MetricSeries, MetricsBackend
from services.executor.tools.tool_arguments import TimeRangeArguments
from services.executor.tools.tool_result import (
    ToolResult,
    bounded_scope,
    bounded_text,
    iso_utc,
)
from services.executor.tools.value_format import format_value
from shared.change_point import find_onset
from shared.contracts import EvidenceRef

TOOL_NAME = "query_metrics"
DESCRIPTION = (
    "Metric time series of one service between start and end (all of its metrics, or one). "
    "Each point is an evidence ref addressed as series[i].points[j]; each series also has a "
    "series[i].summary ref with min/median/max."
)
MAX_SERIES = 12
MAX_POINTS_PER_SERIES = 240
# The share of the larger level a change point must shift by (services/executor/metric_anomaly.py
# uses the same value, so the anomaly's onset and this ref agree).
ONSET_MIN_RELATIVE = 0.1


class QueryMetricsArguments(TimeRangeArguments):
    metric: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_:][A-Za-z0-9_:]{0,127}$",
        description="One metric name; omit for every metric of the service.",
    )
    step_seconds: int = Field(default=60, ge=10, le=3600, description="Resolution in seconds.")


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


def _series_onset(service: str, series: MetricSeries, stamps: list[str]) -> tuple[dict, str] | None:
    """The series' change point as the projection's `onset` and its ref text, or None."""
    change = find_onset([value for _, value in series.points], min_relative=ONSET_MIN_RELATIVE)
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
    return onset, text


def query_metrics(backend: MetricsBackend, args: QueryMetricsArguments) -> ToolResult:
    step = _effective_step(args)
    start, end = iso_utc(args.start), iso_utc(args.end)
    fetched = backend.query_range(args.service, args.metric, args.start, args.end, step)
    series_list = sorted((s for s in fetched if s.points), key=lambda s: s.metric)
    truncated = len(series_list) > MAX_SERIES
    series_list = series_list[:MAX_SERIES]
    scope = bounded_scope(
        tool=TOOL_NAME, service=args.service, metric=args.metric, start=args.start, end=args.end,
        step_seconds=step,
    )

    refs: list[EvidenceRef] = []
    projected: list[dict] = []
    point_count = 0
    for i, series in enumerate(series_list):
        points = series.points[-MAX_POINTS_PER_SERIES:]
        stamps = [iso_utc(ts) for ts, _ in points]
        for j, ((_, value), stamp) in enumerate(zip(points, stamps)):
            refs.append(EvidenceRef(
                raw_path=f"series[{i}].points[{j}]",
                text=bounded_text(f"{args.service} {series.metric}={format_value(value, series.unit)} at {stamp}"),
                source=backend.source_name,
                timestamp=stamp,
            ))
        point_count += len(points)
        bounded_series = MetricSeries(series.metric, series.unit, points)
        stats, summary_text = _series_summary(args.service, bounded_series, start, end)
        refs.append(EvidenceRef(
            raw_path=f"series[{i}].summary", text=bounded_text(summary_text),
            source=backend.source_name, timestamp=end,
        ))
        item = {
            "metric": series.metric,
            "unit": series.unit,
            "points": [[stamp, value] for stamp, (_, value) in zip(stamps, points)],
            "summary": stats,
        }
        onset = _series_onset(args.service, bounded_series, stamps)
        if onset is not None:
            item["onset"] = onset[0]
            refs.append(EvidenceRef(
                raw_path=f"series[{i}].onset", text=bounded_text(onset[1]), source=backend.source_name,
                timestamp=onset[0]["at"],
            ))
        projected.append(item)

    metric_label = args.metric or "*"
    summary = (
        f"{TOOL_NAME} service={args.service} metric={metric_label} {start}..{end}: "
        f"{len(series_list)} series, {point_count} points"
    )
    refs.append(EvidenceRef(raw_path="summary", text=bounded_text(summary), source=backend.source_name, timestamp=end))
    agent_result = {
        "tool": TOOL_NAME,
        "service": args.service,
        "metric": args.metric,
        "start": start,
        "end": end,
        "step_seconds": step,
        "series": projected,
        "series_truncated": truncated,
        "summary": summary,
    }
    return ToolResult(
        tool_name=TOOL_NAME,
        evidence_status="EVIDENCE_FOUND" if point_count else "NO_EVIDENCE",
        agent_result=json.dumps(agent_result, ensure_ascii=False, separators=(",", ":")),
        evidence_refs=refs,
        request_scope=scope,
    )
