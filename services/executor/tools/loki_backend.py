"""LogsBackend over the Loki HTTP API (`GET /loki/api/v1/query_range`, and `/loki/api/v1/query`
for the count of all matching lines; the catalogue of services from
`/loki/api/v1/label/<service label>/values` over the longest window a tool may ask).

The LogQL is built, never passed through: a stream selector on the service label (and on the
level label when levels are asked for), then a case-insensitive line filter for `contains`:
`{service="s", level=~"ERROR|WARN"} |~ "(?i)<escaped>"`. The value is escaped twice — as a
regular expression (RE2) and as a LogQL string literal — so it can only ever be a substring to
find. Timestamps are nanoseconds since the epoch, both ways.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from urllib.parse import quote

from services.executor.tools.backend_readiness import LOKI, Readiness, probe
from services.executor.tools.backends import BackendError, LogQueryResult, LogRecord, utc_now
from services.executor.tools.http_api import HttpConnection, get_api_json, get_api_strings, make_client
from services.executor.tools.prometheus_backend import promql_string
from shared.core.tool_catalogue import MAX_WINDOW

_HOST_LABELS = ("host", "hostname", "instance", "pod", "node")
_LEVEL_IN_LINE = re.compile(r"\b(DEBUG|INFO|WARN|WARNING|ERROR|FATAL)\b")
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

    def selector(
        self, service: str, levels: Sequence[str] | None, contains: str | None, service_label: str | None = None
    ) -> str:
        matchers = [f"{service_label or self._service_labels[0]}={promql_string(service)}"]
        if levels:
            alternatives = "|".join(_re2_literal(level) for level in levels)
            matchers.append(f"{self._level_label}=~{promql_string(alternatives)}")
        query = "{" + ", ".join(matchers) + "}"
        if contains:
            query += " |~ " + promql_string("(?i)" + _re2_literal(contains))
        return query

    def query_range(
        self,
        service: str,
        start: datetime,
        end: datetime,
        levels: Sequence[str] | None,
        contains: str | None,
        limit: int,
    ) -> LogQueryResult:
        result = LogQueryResult(total_matches=0, records=[])
        for label in self._service_labels:  # in turn: the first label with entries answers
            result = self._query_range(label, self.selector(service, levels, contains, label), service, start, end, limit)
            if result.total_matches:
                break
        return result

    def _query_range(
        self, service_label: str, query: str, service: str, start: datetime, end: datetime, limit: int
    ) -> LogQueryResult:
        data = get_api_json(self._client, "loki query_range", "/loki/api/v1/query_range", {
            "query": query, "start": _ns(start), "end": _ns(end), "limit": str(limit), "direction": "backward",
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
        records = records[-limit:]
        return LogQueryResult(total_matches=max(self._count(query, start, end), len(records)), records=records)

    def _count(self, query: str, start: datetime, end: datetime) -> int:
        """All matching lines in the window (the range query returns at most `limit`)."""
        seconds = max(1, int((end - start).total_seconds()))
        data = get_api_json(self._client, "loki count", "/loki/api/v1/query", {
            "query": f"sum(count_over_time({query} [{seconds}s]))", "time": _ns(end),
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

    def _level(self, labels: dict, line: str) -> str:
        value = str(labels.get(self._level_label) or labels.get("detected_level") or "")
        if not value:
            match = _LEVEL_IN_LINE.search(line)
            value = match.group(1) if match else "INFO"
        value = value.upper()
        return {"WARNING": "WARN", "ERR": "ERROR", "CRITICAL": "FATAL"}.get(value, value)

    def close(self) -> None:
        self._client.close()
