"""Which evidence refs of one invocation carry the concrete facts, and in what order to keep them
when only a bounded part can be shown (the model's tool observation, tool_trace_summary).

Stage3 spec, "Verifier evidence summaries SHALL preserve concrete supporting facts": concrete
facts — log messages, alert names, metric values, change lines, i.e. the refs' own texts — come
before boilerplate (the invocation's scope-and-count `summary` ref). Among concrete refs, error and
warning lines, failure words and anomalous metric values come first, and the points of a metrics
call are taken in turns across its series (each series' best, then each one's second best …). Nothing here knows the demo
estate: only the raw_path grammar, the point values of the stored result, and the words of texts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache, partial
from typing import NamedTuple

from services.executor.log_clusters import message_template, template_key
from shared.core.evidence_view import CitedRef

BOILERPLATE_PATHS = frozenset({"summary"})
_SERIES_PATH = re.compile(r"^(?P<series>series\[\d+\])\.points\[\d+\]$")
_SERIES_SUMMARY_PATH = re.compile(r"^series\[\d+\]\.summary$")
# `<ts> <LEVEL> …` (a log hit), or a level word early in any other text
_LEVEL = re.compile(r"\b(?P<level>FATAL|CRITICAL|ERROR|ERR|WARNING|WARN|INFO|DEBUG|TRACE)\b")
_TIMESTAMP_PREFIX = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?\s+")
# Substrings (of the lower-cased text) that mark a failure in any kind of evidence text.
_FAILURE_WORDS = (
    "exception", "traceback", "timeout", "timed out", "refused", "unavailable", "unreachable", "oomkilled",
    "out of memory", "outofmemory",
    "killed", "fail", "denied", "expired", "exhausted", "no space", "disk full", "panic", "crash",
    "reject", "失败", "超时", "异常", "错误", "告警", "拒绝", "过期", "耗尽", "不可用", "崩溃",
)
_SERVER_ERROR_STATUS = re.compile(r"(?:status|code|http)[=: ]*5\d\d", re.IGNORECASE)
# What a _SERVER_ERROR_STATUS match leaves in the lower-cased text (its only letter with a
# non-ASCII case partner is s, whose ſ stays ſ): a case-sensitive scan, several times cheaper.
_SERVER_ERROR_HINT = re.compile(r"(?:tatu[sſ]|code|http)[=: ]*5\d\d")
_LEVEL_SCORE = {
    "FATAL": 5.0, "CRITICAL": 5.0, "ERROR": 4.0, "ERR": 4.0, "WARNING": 3.0, "WARN": 3.0,
    # routine lines: concrete, but rarely what a claim cites
    "INFO": 0.5, "DEBUG": 0.5, "TRACE": 0.5,
}
LEVEL_PREFIX_CHARS = 48  # a level word this close to the start is the line's level
ANOMALY_SPREADS = 4.0
TEMPLATE_CHARS = 240
TEMPLATE_SCAN_CHARS = 1000
FAILURE_SCAN_CHARS = 400
# Runs over one window rank the same texts again: each text's score and template are read once.
_CACHED_TEXTS = 8192
_CACHED_PATHS = 8192


class RankedRef(NamedTuple):
    """A tuple, built several hundred times per invocation (a frozen dataclass costs ~5x more)."""

    position: int  # index in the invocation's evidence_refs
    ref: CitedRef
    score: float
    boilerplate: bool
    template: str  # lines differing only in ids, numbers or timestamps share a template


# A RankedRef from its fields in order: the tuple's own constructor, without NamedTuple's
# Python-level __new__ (a third of the cost, several hundred refs a call).
_new_ranked = partial(tuple.__new__, RankedRef)


@lru_cache(maxsize=_CACHED_PATHS)
def _series_of(raw_path: str) -> str | None:
    """The series (`series[i]`) whose point `raw_path` is, or None. Paths repeat across calls."""
    path = _SERIES_PATH.match(raw_path)
    return path.group("series") if path else None


def _series_names(refs: Sequence[CitedRef]) -> list[str | None]:
    """For each ref, the series (`series[i]`) whose point it is, or None."""
    return [_series_of(ref.raw_path) for ref in refs]


def _median(numbers: list[float]) -> float:
    """statistics.median, without its generality (the same sort and the same arithmetic)."""
    ordered = sorted(numbers)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _point_deviations(refs: Sequence[CitedRef], values: Mapping[str, float],
                      series: list[str | None] | None = None) -> dict[int, float]:
    """For each metric point ref, how many robust spreads it lies from its series' median (its
    value read from the stored result: `values`, raw_path -> value; `series`: _series_names of
    the refs, when the caller has them)."""
    by_series: dict[str, tuple[list[int], list[float]]] = {}
    for index, name in enumerate(series if series is not None else _series_names(refs)):
        if name is not None:
            value = values.get(refs[index].raw_path)
            if value is not None:
                indexes, numbers = by_series.setdefault(name, ([], []))
                indexes.append(index)
                numbers.append(value)
    deviations: dict[int, float] = {}
    for indexes, numbers in by_series.values():
        median = _median(numbers)
        spread = _median([abs(v - median) for v in numbers])
        scale = max(spread, max(abs(median) * 0.02, 1e-9))  # a flat series still has a usable scale
        for index, value in zip(indexes, numbers):
            deviations[index] = abs(value - median) / scale
    return deviations


def _score(index: int, ref: CitedRef, deviations: dict[int, float]) -> float:
    if ref.raw_path in BOILERPLATE_PATHS:
        return 0.0
    # Asked before the summary path: a point's raw_path (`series[i].points[j]`) is never a
    # series summary's, and most refs of a metrics call are points.
    deviation = deviations.get(index)
    if deviation is not None:
        return 2.0 + min(deviation / 10.0, 1.5) if deviation >= ANOMALY_SPREADS else 0.5
    if _SERIES_SUMMARY_PATH.match(ref.raw_path):
        return 3.5  # min / median / max of a series: metric values in one line
    return _text_score(ref.text[:FAILURE_SCAN_CHARS])


@lru_cache(maxsize=_CACHED_TEXTS)
def _text_score(head: str) -> float:
    """The score of a text by its words alone: its level, and a failure it reports."""
    level = _LEVEL.search(head[:LEVEL_PREFIX_CHARS])
    score = _LEVEL_SCORE.get(level.group("level").upper(), 1.0) if level else 1.0
    lowered = head.lower()
    if any(word in lowered for word in _FAILURE_WORDS) or (
        _SERVER_ERROR_HINT.search(lowered) is not None and _SERVER_ERROR_STATUS.search(head)
    ):
        score += 0.5
    return score


def ref_template(text: str) -> str:
    # The head of a line decides its template. The text is masked before it is cut, so that ids
    # and numbers of different lengths cannot shift the cut; very long texts are scanned in part.
    # Like message_template, this treats the ten ASCII digits alike (rank_refs relies on it).
    return _head_template(text[:TEMPLATE_SCAN_CHARS])


@lru_cache(maxsize=_CACHED_TEXTS)
def _head_template(head: str) -> str:
    return message_template(_TIMESTAMP_PREFIX.sub("", head))[:TEMPLATE_CHARS]


def rank_refs(refs: Sequence[CitedRef], values: Mapping[str, float] | None = None) -> list[RankedRef]:
    """All refs, most telling first; boilerplate last; ties keep the tool's own order. `values`
    (`shared.core.tool_results.point_values` of the stored result) ranks metric points by how far
    they lie from their series' median."""
    series = _series_names(refs)
    deviations = _point_deviations(refs, values or {}, series)
    scores = [_score(index, ref, deviations) for index, ref in enumerate(refs)]
    boilerplate = [ref.raw_path in BOILERPLATE_PATHS for ref in refs]
    # The points of a metric series differ only in digits, which no template keeps (template_key):
    # each distinct template is computed once per call.
    by_shape: dict[bytes, str] = {}
    templates: list[str] = []
    for ref in refs:
        head = ref.text[:TEMPLATE_SCAN_CHARS]
        shape = template_key(head)
        template = by_shape.get(shape)
        if template is None:
            template = by_shape[shape] = ref_template(head)
        templates.append(template)
    # One series' points never crowd out another's: the best point of every series comes before
    # any series' second best (a CPU question must still see CPU values when the 5xx series has
    # more striking ones). Other refs (summaries, onsets, log lines) rank by score alone.
    depth: dict[int, int] = {}
    by_series: dict[str, list[int]] = {}
    for index, name in enumerate(series):
        if name is not None:
            by_series.setdefault(name, []).append(index)
    for points in by_series.values():
        for rank, index in enumerate(sorted(points, key=lambda i: (-scores[i], i))):
            depth[index] = rank
    ranked: list[RankedRef] = list(map(_new_ranked, zip(range(len(refs)), refs, scores, boilerplate, templates)))
    return [ranked[i] for i in sorted(range(len(refs)), key=lambda i: (boilerplate[i], depth.get(i, 0), -scores[i], i))]
