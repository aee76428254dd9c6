"""Loki's query API over recorded log entries, answered in Loki's documented formats: what a test
configures is what the LogQL the adapter sends selects, so a test checks the queries too.

Entries are `Entry(labels, line, before_end=…)` (seconds before the end of the asked window: the
`end` of a range query, the `time` of an instant one, so recorded answers follow any window) or
`Entry(labels, line, at=<datetime>)`. A stream is the set of entries with the same labels; a
stream without a `level` label is what a default Kubernetes log collector ships.

The LogQL understood (anything else is HTTP 400 with Loki's error body, so a query the recorder
cannot read fails the test instead of matching nothing):
- a stream selector `{name op "value", …}` with `=`, `!=`, `=~`, `!~`; regular expressions are
  anchored at both ends as in Loki, and an absent label has the value "" (so `level=""` and
  `level!~"…"` select streams without a level label);
- then line filters, in order: `|= "text"`, `!= "text"`, `|~ "re"`, `!~ "re"` (regular
  expressions search the line, `(?i)` included);
- `/loki/api/v1/query_range` with `start`, `end` (nanoseconds, both included), `limit` and
  `direction` (`backward`, the default, keeps the newest `limit` entries; `forward` the oldest);
  the answer's streams hold their entries in that direction's order;
- `/loki/api/v1/query` with `count_over_time(<selector and filters> [<n>ms|s|m|h])`, optionally inside
  `sum(…)`, at `time`: the entries in (time - n, time], one sample per stream or their sum;
- `/loki/api/v1/label/<name>/values`: the label's values over the entries (the window is not
  applied to entries placed relative to the asked end).

Strings are double-quoted with Go escapes (`\\\\`, `\\"`, `\\n`, `\\r`, `\\t`) or back-quoted raw.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

_STRING = r'"(?:[^"\\]|\\.)*"|`[^`]*`'
_MATCHER = re.compile(rf"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*({_STRING})\s*")
_FILTER = re.compile(rf"\s*(\|=|!=|\|~|!~)\s*({_STRING})")
_COUNT = re.compile(
    r"^\s*(sum\s*\()?\s*count_over_time\s*\((?P<inner>.*)\[(?P<n>\d+)(?P<unit>ms|s|m|h)\]\s*\)\s*(?(1)\))\s*$", re.S
)
_UNIT_NS = {"ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}


class LogQLError(ValueError):
    """A query outside the subset this recorder reads."""


@dataclass(frozen=True)
class Entry:
    labels: dict[str, str]
    line: str
    before_end: float | None = None  # seconds before the asked end (range `end`, instant `time`)
    at: datetime | None = None

    def ns(self, end_ns: int) -> int:
        if self.at is not None:
            return int(round(self.at.timestamp() * 1_000_000)) * 1000
        return end_ns - int(round((self.before_end or 0.0) * 1_000_000_000))


def unquote(token: str) -> str:
    """A LogQL string literal's value."""
    if token.startswith("`"):
        return token[1:-1]
    escapes = {"n": "\n", "r": "\r", "t": "\t"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), token[1:-1])


def _go_regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as error:
        raise LogQLError(f"invalid regular expression {pattern!r}: {error}") from None


@dataclass
class LogQuery:
    """A parsed stream selector with its line filters."""

    matchers: list[tuple[str, str, str]]
    filters: list[tuple[str, str]] = field(default_factory=list)

    def selects_stream(self, labels: dict[str, str]) -> bool:
        for name, op, value in self.matchers:
            actual = labels.get(name, "")
            if op == "=" and actual != value:
                return False
            if op == "!=" and actual == value:
                return False
            if op in ("=~", "!~"):
                matched = _go_regex(value).fullmatch(actual) is not None
                if matched != (op == "=~"):
                    return False
        return True

    def keeps_line(self, line: str) -> bool:
        for op, value in self.filters:
            if op == "|=" and value not in line:
                return False
            if op == "!=" and value in line:
                return False
            if op in ("|~", "!~"):
                found = _go_regex(value).search(line) is not None
                if found != (op == "|~"):
                    return False
        return True


def parse_log_query(query: str) -> LogQuery:
    text = query.strip()
    if not text.startswith("{"):
        raise LogQLError(f"a log query starts with a stream selector: {query!r}")
    matchers: list[tuple[str, str, str]] = []
    position = 1
    while True:
        rest = text[position:].lstrip()
        if rest.startswith("}"):
            position = len(text) - len(rest) + 1
            break
        match = _MATCHER.match(text, position)
        if match is None:
            raise LogQLError(f"unreadable stream selector at {text[position:position + 40]!r}")
        matchers.append((match.group(1), match.group(2), unquote(match.group(3))))
        position = match.end()
        if text[position:position + 1] == ",":
            position += 1
        elif text[position:position + 1] != "}":
            raise LogQLError(f"expected ',' or '}}' at {text[position:position + 40]!r}")
    if not any(op in ("=", "=~") and not _matches_empty(op, value) for _, op, value in matchers):
        # Loki refuses a selector every stream would match.
        raise LogQLError("queries require at least one regexp or equality matcher that does not have an empty-compatible value")
    filters: list[tuple[str, str]] = []
    while position < len(text):
        if not text[position:].strip():
            break
        match = _FILTER.match(text, position)
        if match is None:
            raise LogQLError(f"unreadable pipeline stage at {text[position:position + 40]!r}")
        filters.append((match.group(1), unquote(match.group(2))))
        position = match.end()
    return LogQuery(matchers, filters)


def _matches_empty(op: str, value: str) -> bool:
    return value == "" if op == "=" else _go_regex(value).fullmatch("") is not None


class RecordedLoki:
    """The entries a test configures, and Loki's answers over them."""

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self.entries: list[Entry] = list(entries)

    def _selected(self, query: LogQuery, end_ns: int, keep: Callable[[int], bool]) -> list[tuple[int, Entry]]:
        return [
            (ts, entry) for entry in self.entries
            if query.selects_stream(entry.labels) and query.keeps_line(entry.line) and keep(ts := entry.ns(end_ns))
        ]

    def query_range(self, params: dict[str, str]) -> tuple[int, dict]:
        try:
            query = parse_log_query(params["query"])
        except LogQLError as error:
            return _bad_request(error)
        start, end = int(params["start"]), int(params["end"])
        limit = int(params.get("limit", "100"))
        backward = params.get("direction", "backward") == "backward"
        hits = self._selected(query, end, lambda ts: start <= ts <= end)
        hits.sort(key=lambda hit: hit[0], reverse=backward)
        streams: dict[tuple[tuple[str, str], ...], dict] = {}
        for ts, entry in hits[:limit]:
            key = tuple(sorted(entry.labels.items()))
            streams.setdefault(key, {"stream": dict(entry.labels), "values": []})["values"].append([str(ts), entry.line])
        return 200, {"status": "success", "data": {"resultType": "streams", "result": list(streams.values()), "stats": {}}}

    def query(self, params: dict[str, str]) -> tuple[int, dict]:
        match = _COUNT.match(params["query"])
        if match is None:
            return _bad_request(LogQLError(f"only count_over_time is recorded: {params['query']!r}"))
        try:
            query = parse_log_query(match.group("inner"))
        except LogQLError as error:
            return _bad_request(error)
        at = int(params["time"])
        since = at - int(match.group("n")) * _UNIT_NS[match.group("unit")]
        hits = self._selected(query, at, lambda ts: since < ts <= at)
        seconds = at / 1e9
        if match.group(1):  # sum(…): one sample without labels, none when nothing matched
            result = [{"metric": {}, "value": [seconds, str(len(hits))]}] if hits else []
        else:
            counts: dict[tuple[tuple[str, str], ...], int] = {}
            for _, entry in hits:
                key = tuple(sorted(entry.labels.items()))
                counts[key] = counts.get(key, 0) + 1
            result = [{"metric": dict(key), "value": [seconds, str(n)]} for key, n in counts.items()]
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}

    def label_values(self, label: str) -> tuple[int, dict]:
        values = sorted({entry.labels[label] for entry in self.entries if entry.labels.get(label)})
        return 200, {"status": "success", "data": values}


def _bad_request(error: Exception) -> tuple[int, dict]:
    return 400, {"status": "error", "errorType": "bad_data", "error": f"parse error : {error}"}
