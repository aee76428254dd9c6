"""`query_metrics`: metric series of one service over a window, one evidence ref per point.

raw_path conventions (relative to this invocation's evidence_refs):
- `series[i].points[j]` — text `<service> <metric>=<value with unit> at <ts>`
- `series[i].summary`   — text `<service> <metric> <start>..<end>: <n> points, min=…, median=…, max=… at <ts>`
- `series[i].onset`     — only for a series with a change point (`shared.core.change_point`), the one in
  the signal's bad direction (`metric_profile(...).bad_direction`: a hit ratio's fall, a latency's
  rise) when there is one, else the first change either way: text
  `<service> <metric> onset at <ts>: rising|falling from <level before> (median before) to <level after> (median after)`;
  the projection's `series[i].onset` holds {index, at, direction, before, after}
- `series[i].end`       — only when that change ended inside the window (`shared.core.change_point.find_end`):
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

import math
import statistics

from services.executor.service_catalogue import suggestions_for
from services.executor.tools.backends import BackendError, MetricsBackend, MetricSeries
from services.executor.tools.tool_result import (
    ToolResult,
    bounded_scope,
    bounded_text,
    iso_utc,
)
from shared.core.change_point import find_end, find_onset
from shared.core.metric_anomaly import assess_series
from shared.core.symptom_lexicon import metric_profile
from shared.core.tool_catalogue import QUERY_METRICS as TOOL_NAME
from shared.core.tool_catalogue import QueryMetricsArguments
from shared.core.tool_results import (
    AbsentSeries,
    MetricSeriesResult,
    MetricsResult,
    NotExamined,
    SeriesEnd,
    SeriesOnset,
    SeriesSummary,
    SeriesTop,
    dump_result,
    ref_count,
)

DESCRIPTION = (
    "Metric time series of one service between start and end (all of its metrics, or one). "
    "Each point is an evidence ref addressed as series[i].points[j]; each series also has a "
    "series[i].summary ref with min/median/max."
)
MAX_SERIES = 12
MAX_POINTS_PER_SERIES = 240
MAX_UNEXAMINED_NAMES = 8
# The share of the larger level a change point must shift by (shared/core/metric_anomaly.py
# uses the same value, so the anomaly's onset and this ref agree).
ONSET_MIN_RELATIVE = 0.1


def _effective_step(args: QueryMetricsArguments) -> int:
    """Raise the step so that no series exceeds MAX_POINTS_PER_SERIES points."""
    window = (args.end - args.start).total_seconds()
    return max(args.step_seconds, math.ceil(window / MAX_POINTS_PER_SERIES))


def _series_summary(series: MetricSeries) -> SeriesSummary:
    values = [value for _, value in series.points]
    peak_index = max(range(len(values)), key=lambda k: values[k])
    return SeriesSummary(
        count=len(values), min=min(values), median=statistics.median(values), max=values[peak_index],
        max_at=iso_utc(series.points[peak_index][0]),
    )


def _series_onset(series: MetricSeries, stamps: list[str]) -> tuple[SeriesOnset, SeriesEnd | None] | None:
    """The series' change point (the bad direction's first: the one the agent's anomaly cites),
    with where it ended when that is inside the window; None without a change."""
    values = [value for _, value in series.points]
    bad = metric_profile(series.metric, series.unit).bad_direction
    change = (find_onset(values, direction=bad, min_relative=ONSET_MIN_RELATIVE)
              or find_onset(values, min_relative=ONSET_MIN_RELATIVE))
    if change is None:
        return None
    onset = SeriesOnset(
        index=change.index, at=stamps[change.index], direction=change.direction, before=change.before, after=change.after,
    )
    end_index = find_end(values, change)
    if end_index is None:
        return onset, None
    return onset, SeriesEnd(index=end_index, at=stamps[end_index], level=statistics.median(values[end_index:]))


def _top(series: MetricSeries) -> SeriesTop | None:
    top = series.top
    if top is None:
        return None
    return SeriesTop(label=top.label, value=top.value, at=iso_utc(top.at), level=top.level, instances=top.instances)


def no_series_text(service: str, start: str, end: str, absent: AbsentSeries | None) -> str:
    """What a call without any series says, in the answer's words: which label of which backend
    had no such value, and the close values it holds (or that it has series outside the window)."""
    window = f"在 {start} 至 {end} 期间" if start and end else "在查询窗口内"
    # A statement of absence, never of health: 未查询到 … reads as "nothing wrong found" to the
    # verifier, which then wants the evidence to show health; "no series" is what the summary shows.
    text = f"{service} {window}没有指标序列（0 series）"
    if absent is None or not absent.label:
        return text + "。"
    text += f"：{absent.backend or '指标后端'} 中没有 {absent.label}={service} 的序列"
    if absent.elsewhere:
        return text + "（此时间窗口之外有，可调整时间范围）。"
    close = absent.close_values
    # Only nouns its cited summary or the observation vocabulary holds (the verifier checks each).
    return text + (f"，名称相近的值：{'、'.join(close)}。" if close else "，也没有名称相近的值。")


def _absent(backend: MetricsBackend, service: str) -> AbsentSeries | None:
    """For a service without any series: which label was asked, whether the service has series
    outside the window, and the label values closest to its name (a backend that can list them)."""
    listing = getattr(backend, "label_values", None)
    if not callable(listing):
        return None
    try:
        label, values = listing()
    except BackendError:
        return None
    return AbsentSeries(
        backend=backend.source_name.split(":", 1)[0].capitalize(), label=label, elsewhere=service in values,
        close_values=[] if service in values else suggestions_for(service, values),
    )


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

    projected: list[MetricSeriesResult] = []
    for series in series_list:
        points = series.points[-MAX_POINTS_PER_SERIES:]
        stamps = [iso_utc(ts) for ts, _ in points]
        bounded_series = MetricSeries(series.metric, series.unit, points, series.signal, series.query, series.top)
        change = _series_onset(bounded_series, stamps)
        projected.append(MetricSeriesResult(
            metric=series.metric, unit=series.unit, points=[(stamp, value) for stamp, (_, value) in zip(stamps, points)],
            summary=_series_summary(bounded_series), signal=series.signal or None, query=bounded_text(series.query) if series.query else None,
            onset=change[0] if change else None, end=change[1] if change else None, top=_top(series),
        ))
    point_count = sum(len(item.points) for item in projected)

    metric_label = args.metric or "*"
    summary = (
        f"{TOOL_NAME} service={args.service} metric={metric_label} {start}..{end}: "
        f"{len(series_list)} series, {point_count} points"
    )
    absent = _absent(backend, args.service) if not fetched and args.metric is None else None
    if absent is not None:
        summary += f"; {absent.backend} has no series with {absent.label}={args.service} in this window"
        if absent.elsewhere:
            summary += " (it has some outside it)"
        elif absent.close_values:
            summary += f" (close values: {', '.join(absent.close_values)})"
    if not_examined:
        names = ", ".join(not_examined[:MAX_UNEXAMINED_NAMES]) + ("…" if len(not_examined) > MAX_UNEXAMINED_NAMES else "")
        summary += f"; {len(not_examined)} more series not examined: {names}"
    result = MetricsResult(
        tool=TOOL_NAME, service=args.service, metric=args.metric, start=start, end=end, step_seconds=step,
        series=projected, series_truncated=truncated,
        not_examined=NotExamined(count=len(not_examined), names=not_examined[:MAX_UNEXAMINED_NAMES]),
        absent=absent, summary=summary,
    )
    return ToolResult(
        tool_name=TOOL_NAME,
        evidence_status="EVIDENCE_FOUND" if point_count else "NO_EVIDENCE",
        agent_result=dump_result(result),
        source=backend.source_name,
        ref_count=ref_count(result),
        request_scope=scope,
    )
