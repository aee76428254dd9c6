"""LogsBackend over the Loki HTTP API (`GET /loki/api/v1/query_range` for lines, read oldest-first
and newest-first, and `/loki/api/v1/query` with `sum(count_over_time(…))` for counts; the catalogue
of services from `/loki/api/v1/label/<service label>/values` over the longest window a tool may ask).

The LogQL is built, never passed through, and never depends on a level label existing (its name is
a setting, `level` by default). When levels are asked there are two selections:
- streams whose level label names a level: `{service="s", level=~"(?i)(error|err|…)"}` — every line
  there has the label's level;
- streams without it (or with a value naming no level):
  `{service="s", level!~"(?i)(<every level spelling>)"} |~ "<level words, exception markers>"` —
  a prefilter only: each line read is classified by `shared.core.log_levels` and kept when its
  level is one asked for.
Without levels, `{service="s"}` selects every line, each classified the same way. A `contains`
value adds a case-insensitive line filter, `|~ "(?i)<escaped>"`, escaped twice — as a regular
expression (RE2) and as a LogQL string literal — so it can only ever be a substring to find.

Each selection is counted over the whole window and read oldest-first (`direction=forward`) and,
when it holds more than was read, newest-first (`backward`): first and last seen come from the
window, not from a capped sample. A prefiltered selection is read whole when it holds at most
READ_ALL lines; beyond that its count is a range (`matches_up_to`). Also counted: every line of
the service in the window, and the lines of unlabelled streams that hold no level word or
exception marker at all (`unclassified_lines`; lines holding a level word only inside their
message are not among them). Timestamps are nanoseconds since the epoch, both ways.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from services.executor.tools.backend_readiness import LOKI, Readiness, probe
from services.executor.tools.backends import (
    BackendError,
    LogQueryResult,
    LogRecord,
    LogSelection,
    combine_selections,
    utc_now,
)
from services.executor.tools.http_api import HttpConnection, get_api_json, get_api_strings, make_client
from services.executor.tools.prometheus_backend import promql_string
from shared.core.log_levels import LEVELS, level_of, line_pattern, normalise_level, spellings
from shared.core.tool_catalogue import MAX_WINDOW

_HOST_LABELS = ("host", "hostname", "instance", "pod", "node")
# A prefiltered selection holding at most this many lines is read whole (Loki's default
# `max_entries_limit_per_query`), so its count, first and last line are exact.
READ_ALL = 5000
_ANY_LEVEL = promql_string("(?i)(" + "|".join(spellings(LEVELS)) + ")")
_RE2_SPECIAL = re.compile(r"([\\.^$|?*+()\[\]{}])")


def _re2_literal(text: str) -> str:
    """`text` as an RE2 pattern that matches exactly that text."""
    return _RE2_SPECIAL.sub(r"\\\1", text)


def _ns(moment: datetime) -> str:
    return str(int(round(moment.timestamp() * 1_000_000)) * 1000)


def _from_ns(value: str) -> datetime:
    nanoseconds = int(value)
    return datetime.fromtimestamp(nanoseconds // 1_000_000_000, tz=UTC).replace(
        microsecond=(nanoseconds % 1_000_000_000) // 1000
    )


class LokiLogsBackend:
    """`service_labels` are tried in turn: the first label with entries for the service answers."""

    def __init__(
        self,
        connection: str | HttpConnection,
        timeout_seconds: float = 10.0,
        service_labels: Sequence[str] = ("service",),
        level_label: str = "level",
    ) -> None:
        if isinstance(connection, str):
            connection = HttpConnection(connection, timeout_seconds)
        if not service_labels:
            raise ValueError("at least one service label is needed")
        self._connection = connection
        self.source_name = f"loki:{connection.display_url}"
        self._client = make_client(connection)
        self._service_labels = tuple(service_labels)
        self._level_label = level_label

    def readiness(self) -> Readiness:
        """Build info and `/ready` (WrongBackendError when the URL is not a Loki API)."""
        return probe(self._client, LOKI, self._connection.display_url)

    def service_names(self) -> list[str]:
        """Every value of the service labels on streams with entries in the last MAX_WINDOW."""
        end = utc_now()
        names: set[str] = set()
        for label in self._service_labels:
            names.update(get_api_strings(
                self._client, "loki label values", f"/loki/api/v1/label/{quote(label, safe='')}/values",
                {"start": _ns(end - MAX_WINDOW), "end": _ns(end)},
            ))
        return sorted(names)

    def _matcher(self, service: str, service_label: str | None) -> str:
        return f"{service_label or self._service_labels[0]}={promql_string(service)}"

    def selectors(
        self, service: str, levels: Sequence[str] | None, contains: str | None, service_label: str | None = None
    ) -> list[tuple[str, bool]]:
        """The LogQL of each selection a query reads, with whether its lines are classified by
        line (the module docstring)."""
        service_matcher = self._matcher(service, service_label)
        line_filter = " |~ " + promql_string("(?i)" + _re2_literal(contains)) if contains else ""
        if not levels:
            return [("{" + service_matcher + "}" + line_filter, True)]
        asked = promql_string("(?i)(" + "|".join(spellings(levels)) + ")")
        labelled = "{" + f"{service_matcher}, {self._level_label}=~{asked}" + "}" + line_filter
        unlabelled = ("{" + f"{service_matcher}, {self._level_label}!~{_ANY_LEVEL}" + "}" + line_filter
                      + " |~ " + promql_string(line_pattern(levels)))
        return [(labelled, False), (unlabelled, True)]

    def query_range(
        self,
        service: str,
        start: datetime,
        end: datetime,
        levels: Sequence[str] | None,
        contains: str | None,
        limit: int,
    ) -> LogQueryResult:
        result = LogQueryResult(total_matches=0, records=[], window_lines=0, unclassified_lines=0)
        for label in self._service_labels:  # in turn: the first label with lines in the window answers
            window_lines = self._count("{" + self._matcher(service, label) + "}", start, end)
            if not window_lines:
                continue
            unclassified = self._count(
                "{" + f"{self._matcher(service, label)}, {self._level_label}!~{_ANY_LEVEL}" + "}"
                + " !~ " + promql_string(line_pattern()), start, end,
            )
            selections = [
                self._select(label, query, by_line, service, start, end, limit, read_whole=by_line and bool(levels))
                for query, by_line in self.selectors(service, levels, contains, label)
            ]
            return combine_selections(selections, levels, limit, window_lines, unclassified)
        return result

    def _select(
        self, service_label: str, query: str, by_line: bool, service: str, start: datetime, end: datetime, limit: int,
        read_whole: bool = False,
    ) -> LogSelection:
        """One selection, counted and read oldest-first and newest-first (`read_whole`: a
        prefiltered one, read whole when it holds at most READ_ALL lines)."""
        selected = self._count(query, start, end)
        if not selected:
            return LogSelection(selected=0, oldest=[], newest=[], by_line=by_line)
        limit = max(limit, 1)  # the first and the last line date the selection, whatever is returned
        first_read = max(limit, min(selected, READ_ALL)) if read_whole else limit
        oldest = self._read(service_label, query, service, start, end, first_read, "forward")
        newest: list[LogRecord] = []
        if selected > len(oldest):
            newest = self._read(service_label, query, service, start, end, limit, "backward")
        return LogSelection(selected=max(selected, len(oldest)), oldest=oldest, newest=newest, by_line=by_line)

    def _read(
        self, service_label: str, query: str, service: str, start: datetime, end: datetime, limit: int, direction: str
    ) -> list[LogRecord]:
        data = get_api_json(self._client, "loki query_range", "/loki/api/v1/query_range", {
            "query": query, "start": _ns(start), "end": _ns(end), "limit": str(limit), "direction": direction,
        })
        if data.get("resultType") != "streams" or not isinstance(data.get("result"), list):
            raise BackendError(f"loki query_range: expected a streams result, got {data.get('resultType')!r}")
        records: list[LogRecord] = []
        for stream in data["result"]:
            labels = stream.get("stream") or {}
            host = next((str(labels[k]) for k in _HOST_LABELS if labels.get(k)), "")
            for entry in stream.get("values") or []:
                try:
                    ts, line = _from_ns(str(entry[0])), str(entry[1])
                except (TypeError, ValueError, IndexError):
                    raise BackendError('loki query_range: an entry is not ["<ns>", "<line>"]') from None
                records.append(LogRecord(
                    ts=ts, level=self._level(labels, line), service=str(labels.get(service_label) or service),
                    host=host, message=line,
                ))
        records.sort(key=lambda r: r.ts)
        # Streams are merged here: keep the `limit` lines nearest the end read from.
        return records[:limit] if direction == "forward" else records[-limit:]

    def _count(self, query: str, start: datetime, end: datetime) -> int:
        """All lines `query` selects in the window (a range read returns at most `limit`)."""
        # A range is open at its start: one millisecond more takes in a line at `start` itself,
        # which the range reads include.
        milliseconds = max(1, (end - start) // timedelta(milliseconds=1)) + 1
        data = get_api_json(self._client, "loki count", "/loki/api/v1/query", {
            "query": f"sum(count_over_time({query} [{milliseconds}ms]))", "time": _ns(end),
        })
        if data.get("resultType") != "vector":
            raise BackendError(f"loki count: expected a vector result, got {data.get('resultType')!r}")
        total = 0
        for sample in data.get("result") or []:
            try:
                total += int(float(sample["value"][1]))
            except (KeyError, TypeError, ValueError, IndexError):
                raise BackendError("loki count: a sample is not [time, \"value\"]") from None
        return total

    def _level(self, labels: dict[str, object], line: str) -> str:
        label = labels.get(self._level_label)
        if label is None or normalise_level(label) is None:
            label = labels.get("detected_level")  # Loki 3's own guess, when it made one
        return level_of(str(label) if label is not None else None, line)

    def close(self) -> None:
        self._client.close()
