"""What one evidence ref states, read from the stored tool result: `RefFacts`.

A verifier binds a number in a claim to a cited ref only for the same subject (service), metric
and time (DESIGN §5). Those facts are read here, from the invocation's `agent_result` JSON
projection (what the executor's tools write, `services/executor/tools/*_tool.py`; the Prometheus
and Loki backends write the same projections) and, where the projection lacks a field, the
invocation's `request` scope — never by a regex over the rendered ref text.

    ref_facts(invocation, raw_path) -> RefFacts | None
    facts_reader(invocation) -> (raw_path -> RefFacts | None)   # the projection parsed once

Kinds, by tool and raw_path (the raw_path grammar is that of the refs: `series[0].points[12]`):

| tool | raw_path | kind | what is filled |
|---|---|---|---|
| query_metrics | `series[i].points[j]` | metric_point | subject, metric, at, values=[value] |
| query_metrics | `series[i].summary` | metric_summary | subject, metric, window, values=[min, median, max (at=max_at)], item_count=points |
| query_metrics | `series[i].onset` | metric_onset | subject, metric, at=the onset, level=direction ("up" or "down"), window, values=[before (median before the onset), after (median of the new regime, at=the onset)] |
| query_metrics | `series[i].end` | metric_end | subject, metric, at=where the series is back, level=the change's direction, window, values=[during (median of the change), since (median from the end on, at=the end)] |
| query_metrics | `series[i].top` | metric_point | subject, metric, filter=`<label>=<value>` (the instance), at, values=[its value] |
| query_metrics | `summary` | metric_scope | subject, metric=filter=the metric asked for or "", window, item_count=points, empty |
| query_logs | `hits[k]` | log_line | subject, at, level |
| query_logs | `summary` | log_scope | subject, window, level=level filter ("ERROR,WARN" or ""), filter=text filter or "", item_count=total matching lines, empty |
| query_changes | `changes[k]` | change | subject=the changed service, at |
| query_changes | `summary` | change_scope | subject=service asked for or "" (every service), filter=kind asked for or "", window, item_count=total matching records, empty |
| lookup_knowledge | `docs[i].chunks[j]` | knowledge | nothing else (guidance is about no service) |
| lookup_knowledge | `summary` | knowledge | filter=the query, item_count=chunks returned (deduped ones included), empty |

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

import json
import math
import re
from collections.abc import Callable
from typing import Any

from shared.contracts import RefFacts, StatedValue, ToolInvocation

_POINT = re.compile(r"^series\[(\d{1,9})\]\.points\[(\d{1,9})\]$")
_SERIES_SUMMARY = re.compile(r"^series\[(\d{1,9})\]\.summary$")
_SERIES_ONSET = re.compile(r"^series\[(\d{1,9})\]\.onset$")
_SERIES_END = re.compile(r"^series\[(\d{1,9})\]\.end$")
_SERIES_TOP = re.compile(r"^series\[(\d{1,9})\]\.top$")
_HIT = re.compile(r"^hits\[(\d{1,9})\]$")
_CHANGE = re.compile(r"^changes\[(\d{1,9})\]$")
_CHUNK = re.compile(r"^docs\[(\d{1,9})\]\.chunks\[(\d{1,9})\]$")
_ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|\+00:00)$")
MAX_RAW_PATH_CHARS = 300
MAX_TEXT_CHARS = 200  # subject, metric, filter, level
MAX_UNIT_CHARS = 32
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


def normalise_unit(unit: str) -> tuple[str, float] | None:
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


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Malformed
    return value


def _item(items: Any, index: str) -> Any:
    position = int(index)
    if not isinstance(items, list) or position >= len(items):
        raise _Malformed
    return items[position]


class _Reader:
    """One invocation's projection, parsed once; `facts(raw_path)` for each ref."""

    def __init__(self, invocation: ToolInvocation) -> None:
        self._tool = invocation.tool_name
        self._request = invocation.request if isinstance(invocation.request, dict) else {}
        try:
            projection = json.loads(invocation.agent_result or "")
        except (TypeError, ValueError, RecursionError):
            projection = None
        self._valid = isinstance(projection, dict) and projection.get("tool") == self._tool
        self._projection: dict[str, Any] = projection if self._valid else {}

    def facts(self, raw_path: str) -> RefFacts | None:
        if not self._valid or not isinstance(raw_path, str) or len(raw_path) > MAX_RAW_PATH_CHARS:
            return None
        reader = _READERS.get(self._tool)
        if reader is None:
            return None
        try:
            return reader(self, raw_path.strip())
        except Exception:  # _Malformed, or a shape nobody foresaw: no facts either way
            return None

    # --- shared fields ----------------------------------------------------------------------------

    def _field(self, key: str) -> Any:
        """The projection's value of `key`, or the request scope's where the projection has none."""
        value = self._projection.get(key)
        return self._request.get(key) if value is None else value

    def _subject(self, *, required: bool = True) -> str:
        return _text(self._field("service"), required=required)

    def _window(self) -> tuple[str, str]:
        return _stamp(self._field("start")), _stamp(self._field("end"))

    # --- query_metrics ----------------------------------------------------------------------------

    def _series(self, index: str) -> tuple[dict[str, Any], str, tuple[str, float]]:
        series = _item(self._projection.get("series"), index)
        if not isinstance(series, dict):
            raise _Malformed
        unit = normalise_unit(series.get("unit", ""))
        if unit is None:
            raise _Malformed
        return series, _text(series.get("metric"), required=True), unit

    def metrics(self, raw_path: str) -> RefFacts:
        if match := _POINT.match(raw_path):
            series, metric, (unit, factor) = self._series(match.group(1))
            point = _item(series.get("points"), match.group(2))
            if not isinstance(point, list) or len(point) != 2:
                raise _Malformed
            at = _stamp(point[0])
            return RefFacts(
                kind="metric_point", subject=self._subject(), metric=metric, at=at,
                values=[StatedValue(name="value", value=_number(point[1], factor), unit=unit, at=at)],
            )
        if match := _SERIES_SUMMARY.match(raw_path):
            series, metric, (unit, factor) = self._series(match.group(1))
            stats = series.get("summary")
            if not isinstance(stats, dict):
                raise _Malformed
            start, end = self._window()
            return RefFacts(
                kind="metric_summary", subject=self._subject(), metric=metric, window_start=start, window_end=end,
                values=[
                    StatedValue(name="min", value=_number(stats.get("min"), factor), unit=unit),
                    StatedValue(name="median", value=_number(stats.get("median"), factor), unit=unit),
                    StatedValue(name="max", value=_number(stats.get("max"), factor), unit=unit,
                                at=_stamp(stats.get("max_at"))),
                ],
                item_count=_count(stats.get("count")),
            )
        if match := _SERIES_ONSET.match(raw_path):
            series, metric, (unit, factor) = self._series(match.group(1))
            onset = series.get("onset")
            if not isinstance(onset, dict) or onset.get("direction") not in ("up", "down"):
                raise _Malformed
            at = _stamp(onset.get("at"))
            start, end = self._window()
            return RefFacts(
                kind="metric_onset", subject=self._subject(), metric=metric, at=at, level=onset["direction"],
                window_start=start, window_end=end,
                values=[
                    StatedValue(name="before", value=_number(onset.get("before"), factor), unit=unit),
                    StatedValue(name="after", value=_number(onset.get("after"), factor), unit=unit, at=at),
                ],
            )
        if match := _SERIES_END.match(raw_path):
            series, metric, (unit, factor) = self._series(match.group(1))
            onset, ended = series.get("onset"), series.get("end")
            if not isinstance(onset, dict) or onset.get("direction") not in ("up", "down") or not isinstance(ended, dict):
                raise _Malformed
            at = _stamp(ended.get("at"))
            start, end = self._window()
            return RefFacts(
                kind="metric_end", subject=self._subject(), metric=metric, at=at, level=onset["direction"],
                window_start=start, window_end=end,
                values=[
                    StatedValue(name="during", value=_number(onset.get("after"), factor), unit=unit),
                    StatedValue(name="since", value=_number(ended.get("level"), factor), unit=unit, at=at),
                ],
            )
        if match := _SERIES_TOP.match(raw_path):
            series, metric, (unit, factor) = self._series(match.group(1))
            top = series.get("top")
            if not isinstance(top, dict):
                raise _Malformed
            at = _stamp(top.get("at"))
            instance = f"{_text(top.get('label'), required=True)}={_text(top.get('value'), required=True)}"
            return RefFacts(
                kind="metric_point", subject=self._subject(), metric=metric, at=at, filter=instance[:MAX_TEXT_CHARS],
                values=[StatedValue(name="value", value=_number(top.get("level"), factor), unit=unit, at=at)],
            )
        if raw_path == "summary":
            series_list = self._projection.get("series")
            if not isinstance(series_list, list):
                raise _Malformed
            points = 0
            for series in series_list:
                if not isinstance(series, dict) or not isinstance(series.get("points"), list):
                    raise _Malformed
                points += len(series["points"])
            metric = _text(self._field("metric"))
            start, end = self._window()
            return RefFacts(
                kind="metric_scope", subject=self._subject(), metric=metric, filter=metric,
                window_start=start, window_end=end, item_count=points, empty=points == 0,
            )
        raise _Malformed

    # --- query_logs -------------------------------------------------------------------------------

    def logs(self, raw_path: str) -> RefFacts:
        if match := _HIT.match(raw_path):
            hit = _item(self._projection.get("hits"), match.group(1))
            if not isinstance(hit, dict):
                raise _Malformed
            return RefFacts(
                kind="log_line", subject=self._subject(), at=_stamp(hit.get("ts")),
                level=_text(hit.get("level"), required=True).upper(),
            )
        if raw_path == "summary":
            levels = self._field("level")
            if isinstance(levels, list):
                level = ",".join(_text(item, required=True).upper() for item in levels)
            else:
                level = _text(levels).upper()
            total = _count(self._projection.get("total_matches"))
            start, end = self._window()
            return RefFacts(
                kind="log_scope", subject=self._subject(), window_start=start, window_end=end,
                level=level[:MAX_TEXT_CHARS], filter=_text(self._field("contains")), item_count=total, empty=total == 0,
            )
        raise _Malformed

    # --- query_changes ----------------------------------------------------------------------------

    def changes(self, raw_path: str) -> RefFacts:
        if match := _CHANGE.match(raw_path):
            change = _item(self._projection.get("changes"), match.group(1))
            if not isinstance(change, dict):
                raise _Malformed
            return RefFacts(kind="change", subject=_text(change.get("service"), required=True), at=_stamp(change.get("ts")))
        if raw_path == "summary":
            total = _count(self._projection.get("total_matches"))
            start, end = self._window()
            return RefFacts(
                kind="change_scope", subject=self._subject(required=False), filter=_text(self._field("kind")),
                window_start=start, window_end=end, item_count=total, empty=total == 0,
            )
        raise _Malformed

    # --- lookup_knowledge -------------------------------------------------------------------------

    def knowledge(self, raw_path: str) -> RefFacts:
        docs = self._projection.get("docs")
        if match := _CHUNK.match(raw_path):
            doc = _item(docs, match.group(1))
            if not isinstance(doc, dict) or not isinstance(_item(doc.get("chunks"), match.group(2)), dict):
                raise _Malformed
            return RefFacts(kind="knowledge")
        if raw_path == "summary":
            if not isinstance(docs, list):
                raise _Malformed
            chunks = 0
            for doc in docs:
                if not isinstance(doc, dict) or not isinstance(doc.get("chunks"), list):
                    raise _Malformed
                chunks += len(doc["chunks"])
            return RefFacts(kind="knowledge", filter=_text(self._field("query")), item_count=chunks, empty=chunks == 0)
        raise _Malformed


_READERS: dict[str, Callable[[_Reader, str], RefFacts]] = {
    "query_metrics": _Reader.metrics,
    "query_logs": _Reader.logs,
    "query_changes": _Reader.changes,
    "lookup_knowledge": _Reader.knowledge,
}


def facts_reader(invocation: ToolInvocation) -> Callable[[str], RefFacts | None]:
    """The facts of any raw_path of this invocation; its `agent_result` is parsed once, here."""
    try:
        return _Reader(invocation).facts
    except Exception:  # facts are optional: an unreadable record simply has none
        return lambda raw_path: None


def ref_facts(invocation: ToolInvocation, raw_path: str) -> RefFacts | None:
    """What the ref at `raw_path` of this invocation states, or None. Never raises."""
    return facts_reader(invocation)(raw_path)
