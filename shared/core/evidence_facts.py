"""What one evidence ref states, read from the stored tool result: `RefFacts`.

A verifier binds a number in a claim to a cited ref only for the same subject (service), metric
and time (DESIGN §5). Those facts are read here, from the invocation's stored result read with its
typed schema (`shared.core.tool_results`, what every evidence tool writes, whichever backend it
reads) and, where the result lacks a field, the invocation's `request` scope — never by a regex
over the rendered ref text.

    ref_facts(invocation, raw_path) -> RefFacts | None
    facts_reader(invocation) -> (raw_path -> RefFacts | None)   # the projection parsed once

Kinds, by tool and raw_path (the raw_path grammar is that of the refs: `series[0].points[12]`):

| tool | raw_path | kind | what is filled |
|---|---|---|---|
| query_metrics | `series[i].points[j]` | metric_point | subject, metric, at, values=[value], ongoing=the series' last point with an onset and no end |
| query_metrics | `series[i].summary` | metric_summary | subject, metric, window, values=[min, median, max (at=max_at)], item_count=points, onset=the series' onset direction or "", series_state=rise, fall, quiet or unclear (`shared.core.metric_anomaly.read_series`) |
| query_metrics | `series[i].onset` | metric_onset | subject, metric, at=the onset, level=direction ("up" or "down"), window, values=[before (median before the onset), after (median of the new regime, at=the onset)] |
| query_metrics | `series[i].end` | metric_end | subject, metric, at=where the series is back, level=the change's direction, window, values=[during (median of the change), since (median from the end on, at=the end)] |
| query_metrics | `series[i].top` | metric_point | subject, metric, filter=`<label>=<value>` (the instance), at, values=[its value] |
| query_metrics | `summary` | metric_scope | subject, metric=filter=the metric asked for or "", window, item_count=points, empty |
| query_logs | `hits[k]` | log_line | subject, at, level, window (the read's), first_of_kind (see below), signature (the message masked, `shared.log_templates.mask`) |
| query_logs | `summary` | log_scope | subject, window, level=level filter ("ERROR,WARN" or ""), filter=text filter or "", item_count=total matching lines, empty |
| query_changes | `changes[k]` | change | subject=the changed service, at, change_kind, actor=the author |
| query_changes | `summary` | change_scope | subject=service asked for or "" (every service), filter=kind asked for or "", window, item_count=total matching records, empty |
| lookup_knowledge | `docs[i].chunks[j]` | knowledge | nothing else (guidance is about no service) |
| lookup_knowledge | `summary` | knowledge | filter=the query, item_count=chunks returned (deduped ones included), empty |

A log line is `first_of_kind` when the read holds every matching line before it (all lines
matched were returned, or it lies in the oldest part returned) and none of them has its mask
(`shared.log_templates.mask`: ids and numbers masked): the first line of its kind in the read's
window, a new kind of line where the window starts before it.

Scope counts are the totals the summary text states (`query_logs`: matching lines, of which the
most recent were returned), so an empty scope is a search that found nothing.

Units (StatedValue.unit) are normalised to a small set; a value is rescaled only where its unit is:

| tool's unit | unit | value |
|---|---|---|
| `percent`, `%` | `%` | as stored |
| `ratio` | `%` | × 100 |
| `ms`, `milliseconds` | `ms` | as stored |
| `s`, `seconds` | `s` | as stored |
| `bytes` | `MB` | ÷ 1024² (MB as the verifier reads it: 1024-based, like the MiB/GiB the ref text shows) |
| `per_second`, `rps`, `ops` | `/s` | as stored |
| `count`, `1` | `count` | as stored |
| `""`, `none` | `""` | as stored |
| anything else | as written (at most 32 characters) | as stored |

Timestamps are ISO-8601 UTC strings exactly as the tool wrote them. Anything unknown or malformed
(another tool, a path the projection does not have, a wrong type, a timestamp that is not ISO-8601
UTC, a non-finite value) gives None; these functions never raise.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from shared.core.contracts import RefFacts, StatedValue, ToolInvocation
from shared.core.metric_anomaly import read_series
from shared.core.tool_results import (
    ChangesResult,
    KnowledgeResult,
    LogsResult,
    MetricSeriesResult,
    MetricsResult,
    parse_path,
    read_result,
)
from shared.log_templates import mask

_T = TypeVar("_T")

_ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|\+00:00)$")
MAX_RAW_PATH_CHARS = 300
MAX_TEXT_CHARS = 200  # subject, metric, filter, level
MAX_UNIT_CHARS = 32
MAX_SIGNATURE_CHARS = 1000
_MiB = 1024.0 * 1024.0
# tool unit (lower case) -> (unit, factor applied to the value)
_UNITS: dict[str, tuple[str, float]] = {
    "percent": ("%", 1.0), "%": ("%", 1.0), "ratio": ("%", 100.0),
    "ms": ("ms", 1.0), "milliseconds": ("ms", 1.0),
    "s": ("s", 1.0), "seconds": ("s", 1.0),
    "bytes": ("MB", 1.0 / _MiB),
    "per_second": ("/s", 1.0), "rps": ("/s", 1.0), "ops": ("/s", 1.0),
    "count": ("count", 1.0), "1": ("count", 1.0),
    "": ("", 1.0), "none": ("", 1.0),
}


class _Malformed(Exception):
    """The projection does not say what this kind of ref needs: no facts."""


def normalise_unit(unit: object) -> tuple[str, float] | None:
    """(the normalised unit, the factor its values are multiplied by), or None when `unit` is not
    a string. Units outside the table are kept as written (bounded)."""
    if not isinstance(unit, str):
        return None
    known = _UNITS.get(unit.strip().lower())
    if known is not None:
        return known
    return unit.strip()[:MAX_UNIT_CHARS], 1.0


def _number(value: Any, factor: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Malformed
    number = float(value) * factor
    if not math.isfinite(number):
        raise _Malformed
    # A rescaled value without the float noise of the multiplication (0.07 × 100 is 7, not 7.000000000000001).
    return number if factor == 1.0 else float(f"{number:.12g}")


def _stamp(value: Any) -> str:
    if not isinstance(value, str) or not _ISO_UTC.match(value):
        raise _Malformed
    return value


def _text(value: Any, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise _Malformed
    return value[:MAX_TEXT_CHARS]


def _item(items: Sequence[_T], index: int) -> _T:
    if not 0 <= index < len(items):
        raise _Malformed
    return items[index]


class _Reader:
    """One invocation's stored result, read once with its typed schema; `facts(raw_path)` for each ref."""

    def __init__(self, invocation: ToolInvocation) -> None:
        self._request = invocation.request if isinstance(invocation.request, dict) else {}
        self._result = read_result(invocation.tool_name, invocation.agent_result)

    def facts(self, raw_path: str) -> RefFacts | None:
        if self._result is None or not isinstance(raw_path, str) or len(raw_path) > MAX_RAW_PATH_CHARS:
            return None
        path = parse_path(raw_path.strip())
        if path is None:
            return None
        try:
            result = self._result
            if isinstance(result, MetricsResult):
                return self.metrics(result, *path)
            if isinstance(result, LogsResult):
                return self.logs(result, *path)
            if isinstance(result, ChangesResult):
                return self.changes(result, *path)
            return self.knowledge(result, *path)
        except Exception:  # _Malformed, or a shape nobody foresaw: no facts either way
            return None

    # --- shared fields ----------------------------------------------------------------------------

    def _field(self, value: Any, key: str) -> Any:
        """The result's value of `key`, or the request scope's where the result has none."""
        return self._request.get(key) if value is None else value

    def _subject(self, value: str | None, *, required: bool = True) -> str:
        return _text(self._field(value, "service"), required=required)

    def _window(self, start: str | None, end: str | None) -> tuple[str, str]:
        return _stamp(self._field(start, "start")), _stamp(self._field(end, "end"))

    # --- query_metrics ----------------------------------------------------------------------------

    @staticmethod
    def _series(result: MetricsResult, index: int) -> tuple[MetricSeriesResult, str, tuple[str, float]]:
        series = _item(result.series, index)
        unit = normalise_unit(series.unit)
        if unit is None:
            raise _Malformed
        return series, _text(series.metric, required=True), unit

    def metrics(self, result: MetricsResult, name: str, i: int, j: int, part: str) -> RefFacts:
        subject = self._subject(result.service)
        if name == "summary":
            metric = _text(self._field(result.metric, "metric"))
            start, end = self._window(result.start, result.end)
            points = result.point_count
            return RefFacts(
                kind="metric_scope", subject=subject, metric=metric, filter=metric,
                window_start=start, window_end=end, item_count=points, empty=points == 0,
            )
        if name != "series":
            raise _Malformed
        series, metric, (unit, factor) = self._series(result, i)
        if part == "points":
            stamp, value = _item(series.points, j)
            at = _stamp(stamp)
            return RefFacts(
                kind="metric_point", subject=subject, metric=metric, at=at,
                values=[StatedValue(name="value", value=_number(value, factor), unit=unit, at=at)],
                ongoing=j == len(series.points) - 1 and series.onset is not None and series.end is None,
            )
        if part == "summary" and series.summary is not None:
            stats = series.summary
            start, end = self._window(result.start, result.end)
            return RefFacts(
                kind="metric_summary", subject=subject, metric=metric, window_start=start, window_end=end,
                values=[
                    StatedValue(name="min", value=_number(stats.min, factor), unit=unit),
                    StatedValue(name="median", value=_number(stats.median, factor), unit=unit),
                    StatedValue(name="max", value=_number(stats.max, factor), unit=unit, at=_stamp(stats.max_at)),
                ],
                item_count=stats.count, onset=series.onset.direction if series.onset is not None else "",
                series_state=read_series(metric, series.unit, series.values).state,
            )
        onset = series.onset
        if part == "onset" and onset is not None:
            at = _stamp(onset.at)
            start, end = self._window(result.start, result.end)
            return RefFacts(
                kind="metric_onset", subject=subject, metric=metric, at=at, level=onset.direction,
                window_start=start, window_end=end,
                values=[
                    StatedValue(name="before", value=_number(onset.before, factor), unit=unit),
                    StatedValue(name="after", value=_number(onset.after, factor), unit=unit, at=at),
                ],
            )
        if part == "end" and onset is not None and series.end is not None:
            at = _stamp(series.end.at)
            start, end = self._window(result.start, result.end)
            return RefFacts(
                kind="metric_end", subject=subject, metric=metric, at=at, level=onset.direction,
                window_start=start, window_end=end,
                values=[
                    StatedValue(name="during", value=_number(onset.after, factor), unit=unit),
                    StatedValue(name="since", value=_number(series.end.level, factor), unit=unit, at=at),
                ],
            )
        top = series.top
        if part == "top" and top is not None:
            at = _stamp(top.at)
            instance = f"{_text(top.label, required=True)}={_text(top.value, required=True)}"
            return RefFacts(
                kind="metric_point", subject=subject, metric=metric, at=at, filter=instance[:MAX_TEXT_CHARS],
                values=[StatedValue(name="value", value=_number(top.level, factor), unit=unit, at=at)],
            )
        raise _Malformed

    # --- query_logs -------------------------------------------------------------------------------

    def logs(self, result: LogsResult, name: str, i: int, j: int, part: str) -> RefFacts:
        if name == "hits" and not part:
            hit = _item(result.hits, i)
            try:
                start, end = self._window(result.start, result.end)
            except _Malformed:
                start, end = "", ""
            return RefFacts(
                kind="log_line", subject=self._subject(result.service), at=_stamp(hit.ts),
                level=_text(hit.level, required=True).upper(), window_start=start, window_end=end,
                first_of_kind=_first_of_kind(result, i),
                signature=mask(hit.message)[:MAX_SIGNATURE_CHARS] if isinstance(hit.message, str) else "",
            )
        if name == "summary":
            levels = self._field(result.level, "level")
            if isinstance(levels, list):
                level = ",".join(_text(item, required=True).upper() for item in levels)
            else:
                level = _text(levels).upper()
            start, end = self._window(result.start, result.end)
            total = result.total_matches
            return RefFacts(
                kind="log_scope", subject=self._subject(result.service), window_start=start, window_end=end,
                level=level[:MAX_TEXT_CHARS], filter=_text(self._field(result.contains, "contains")),
                item_count=total, empty=total == 0,
            )
        raise _Malformed

    # --- query_changes ----------------------------------------------------------------------------

    def changes(self, result: ChangesResult, name: str, i: int, j: int, part: str) -> RefFacts:
        if name == "changes" and not part:
            change = _item(result.changes, i)
            return RefFacts(
                kind="change", subject=_text(change.service, required=True), at=_stamp(change.ts),
                change_kind=_text(change.kind)[:MAX_TEXT_CHARS], actor=_text(change.author)[:MAX_TEXT_CHARS],
            )
        if name == "summary":
            start, end = self._window(result.start, result.end)
            total = result.total_matches
            return RefFacts(
                kind="change_scope", subject=self._subject(result.service, required=False),
                filter=_text(self._field(result.kind, "kind")),
                window_start=start, window_end=end, item_count=total, empty=total == 0,
            )
        raise _Malformed

    # --- lookup_knowledge -------------------------------------------------------------------------

    def knowledge(self, result: KnowledgeResult, name: str, i: int, j: int, part: str) -> RefFacts:
        if name == "docs" and part == "chunks":
            _item(_item(result.docs, i).chunks, j)
            return RefFacts(kind="knowledge")
        if name == "summary":
            chunks = sum(len(doc.chunks) for doc in result.docs)
            return RefFacts(kind="knowledge", filter=_text(self._field(result.query or None, "query")), item_count=chunks, empty=chunks == 0)
        raise _Malformed


def facts_reader(invocation: ToolInvocation) -> Callable[[str], RefFacts | None]:
    """The facts of any raw_path of this invocation; its `agent_result` is parsed once, here."""
    try:
        return _Reader(invocation).facts
    except Exception:  # facts are optional: an unreadable record simply has none
        return lambda raw_path: None


def ref_facts(invocation: ToolInvocation, raw_path: str) -> RefFacts | None:
    """What the ref at `raw_path` of this invocation states, or None. Never raises."""
    return facts_reader(invocation)(raw_path)


def _first_of_kind(result: LogsResult, index: int) -> bool:
    """Whether hit `index` is the first line of its kind in the read (module docstring)."""
    hits = result.hits
    stamps = [hit.ts if isinstance(hit.ts, str) else "" for hit in hits]
    if not stamps[index]:
        return False
    order = sorted(range(len(hits)), key=lambda k: (stamps[k], k))
    rank = order.index(index)
    returned = len(hits)
    total = result.total_matches if isinstance(result.total_matches, int) else returned
    if total > returned and rank >= returned - returned // 2:
        return False  # lines between the oldest and the newest part were not returned
    own = mask(hits[index].message) if isinstance(hits[index].message, str) else None
    if own is None:
        return False
    return all(mask(hits[k].message) != own for k in order[:rank] if isinstance(hits[k].message, str))

