"""The stored series a metric citation points at, cut to a window a frontend can draw.
Read from the invocation's stored typed result (`shared.core.tool_results`), never from
model text: the points are the stored points, timestamps and values as stored (UTC).

Which series: the one the citation's `raw_path` names (`series[i]…`); a citation of a whole call
(a single-ReAct Analysis) only when the call returned exactly one series. Which points: at most
`MAX_SERIES_POINTS`, centred on the cited point (`series[i].points[j]`), else on the series' onset,
else on its end (`series[i].end`), else on its maximum.
"""

from __future__ import annotations

from shared.core.structured_answer import MAX_SERIES_POINTS, SeriesWindow
from shared.core.tool_results import MetricSeriesResult, MetricsResult, ToolResultData, parse_path


def _focus(series: MetricSeriesResult, part: str, j: int) -> int:
    count = len(series.points)
    if part == "points" and 0 <= j < count:
        return j
    if part == "end" and series.end is not None and series.end.index < count:
        return series.end.index
    if series.onset is not None and series.onset.index < count:
        return series.onset.index
    if series.summary is not None:
        at = next((k for k, (ts, _) in enumerate(series.points) if ts == series.summary.max_at), None)
        if at is not None:
            return at
    return max(range(count), key=lambda k: series.points[k][1]) if count else -1


def series_window(result: ToolResultData | None, raw_path: str, limit: int = MAX_SERIES_POINTS) -> SeriesWindow | None:
    """The window of the series `raw_path` cites in `result`; None when it cites no series."""
    if not isinstance(result, MetricsResult) or not result.series:
        return None
    if raw_path:
        parsed = parse_path(raw_path)
        if parsed is None or parsed[0] != "series" or parsed[1] >= len(result.series):
            return None
        _, i, j, part = parsed
    elif len(result.series) == 1:
        i, j, part = 0, -1, ""
    else:
        return None
    series = result.series[i]
    if not series.points:
        return None
    focus = _focus(series, part, j)
    count = len(series.points)
    first = min(max(0, focus - limit // 2), max(0, count - limit))
    shown = series.points[first:first + limit]
    # One validation of the whole window (a model per point costs half again as much).
    return SeriesWindow.model_validate({
        "metric": series.metric, "unit": series.unit,
        "points": [{"timestamp": ts, "value": value} for ts, value in shown],
        "first_index": first, "focus": focus - first if focus >= 0 else -1, "truncated": len(shown) < count,
    })
