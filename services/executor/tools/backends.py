"""The one interface per tool that every backend implements: the SQL estate (the embedded
default), Prometheus and Loki for metrics and logs, a Markdown directory for knowledge and any
SQLAlchemy database for change records."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NoReturn, Protocol

from shared.redaction import Redactor


class BackendError(RuntimeError):
    """A backend could not answer (HTTP error, error status, timeout, unreadable response). The
    registry turns it into a ToolBackendError, which the caller records as an ERROR invocation."""


@dataclass(frozen=True)
class Contributor:
    """The instance (pod, host …) highest at a combined series' peak."""

    label: str  # the label naming it, e.g. `pod`
    value: str
    at: datetime
    level: float  # its own value at that instant
    instances: int  # how many instances the series combines


@dataclass(frozen=True)
class MetricSeries:
    metric: str
    unit: str
    points: list[tuple[datetime, float]]  # ascending by time, timezone-aware UTC
    signal: str = ""  # a golden signal (error_ratio, latency_p99, request_rate, cpu …) or ""
    query: str = ""  # how the backend computed it (PromQL), when it is not a stored series
    top: Contributor | None = None
    # False: a series the backend knows of but did not read (more than it reads per call); the
    # tool counts it among those not examined.
    examined: bool = True


@dataclass(frozen=True)
class LogRecord:
    ts: datetime
    level: str
    service: str
    host: str
    message: str


@dataclass(frozen=True)
class LogQueryResult:
    total_matches: int  # all lines matching the filters, not only those returned
    # Ascending by time, at most `limit`: all matching lines, or when more matched the oldest half
    # and the newest half of them (`sample_lines`).
    records: list[LogRecord] = field(default_factory=list)
    # Lines of any level in the window, whatever the filters (None: not counted).
    window_lines: int | None = None
    # Lines in the window whose level neither a label nor the line states (None: not counted).
    unclassified_lines: int | None = None
    # The first and the last matching line of the whole window (None: none matched).
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    # Set when `total_matches` is only what was read and classified: lines selected by level words
    # (no level label) were not all read, and up to this many may match.
    matches_up_to: int | None = None


@dataclass(frozen=True)
class LogSelection:
    """What a backend read of one selection of lines in a window: its oldest and its newest lines
    (each ascending by time, possibly overlapping) and how many lines the selection holds.
    `by_line`: the selection was made without knowing the lines' levels (no level label, or every
    level), so each line read is classified and kept only when its level is one asked for."""

    selected: int
    oldest: list[LogRecord]
    newest: list[LogRecord]
    by_line: bool = False


_RecordKey = tuple[datetime, str, str, str]


def _record_key(record: LogRecord) -> _RecordKey:
    return record.ts, record.service, record.host, record.message


def _union(oldest: Sequence[LogRecord], newest: Sequence[LogRecord]) -> list[LogRecord]:
    """The lines of two reads of one selection, ascending by time: a line read by both once (a
    line stored twice, twice)."""
    seen: dict[_RecordKey, int] = {}
    for record in oldest:
        seen[_record_key(record)] = seen.get(_record_key(record), 0) + 1
    lines = list(oldest)
    for record in newest:
        key = _record_key(record)
        if seen.get(key):
            seen[key] -= 1
        else:
            lines.append(record)
    return sorted(lines, key=lambda r: r.ts)


def sample_lines(records: Sequence[LogRecord], limit: int) -> list[LogRecord]:
    """`records` (ascending by time) when at most `limit`; else their oldest ceil(limit/2) and newest
    floor(limit/2), so that a window's first and last lines are both among those returned."""
    if len(records) <= limit:
        return list(records)
    newest = limit // 2
    return list(records[: limit - newest]) + (list(records[-newest:]) if newest else [])


def combine_selections(
    selections: Sequence[LogSelection], levels: Sequence[str] | None, limit: int,
    window_lines: int | None, unclassified_lines: int | None,
) -> LogQueryResult:
    """One result from the selections a backend read: the lines of the asked `levels` (every line
    when None), counted, dated from the whole window and sampled oldest and newest. A by-line
    selection read whole counts exactly; one read in part counts what it read (`total_matches`)
    and at most all of it but the lines read and refused (`matches_up_to`)."""
    wanted = {level.upper() for level in levels} if levels else None
    kept: list[LogRecord] = []
    total, up_to, partial = 0, 0, False
    first: datetime | None = None
    last: datetime | None = None
    for selection in selections:
        read = _union(selection.oldest, selection.newest)
        accepted = [r for r in read if not selection.by_line or wanted is None or r.level in wanted]
        kept += accepted
        whole = len(read) >= selection.selected
        if whole or not selection.by_line or wanted is None:
            count = len(accepted) if whole else selection.selected
            total, up_to = total + count, up_to + count
        else:
            partial = True
            total += len(accepted)
            up_to += selection.selected - (len(read) - len(accepted))
        if accepted:
            first = accepted[0].ts if first is None else min(first, accepted[0].ts)
            last = accepted[-1].ts if last is None else max(last, accepted[-1].ts)
    records = sorted(kept, key=lambda r: r.ts)
    return LogQueryResult(
        total_matches=total, records=sample_lines(records, limit), window_lines=window_lines,
        unclassified_lines=unclassified_lines, first_ts=first, last_ts=last,
        matches_up_to=up_to if partial and up_to > total else None,
    )


@dataclass(frozen=True)
class ChangeRecord:
    ts: datetime
    service: str
    kind: str  # deploy | config | rollback | scale | …
    author: str
    summary: str


@dataclass(frozen=True)
class ChangeQueryResult:
    total_matches: int  # all records matching the filters, not only those returned
    records: list[ChangeRecord] = field(default_factory=list)  # ascending by time, at most `limit`


@dataclass(frozen=True)
class KnowledgeChunk:
    heading: str  # the heading path inside the document, e.g. "排查步骤"
    text: str  # the chunk as written (heading line included), bounded
    score: float


@dataclass(frozen=True)
class KnowledgeDocument:
    path: str  # relative to the knowledge directory, '/'-separated
    title: str
    kind: str  # runbook | incident | note (from the folder or front matter)
    score: float  # the best chunk's score
    chunks: list[KnowledgeChunk] = field(default_factory=list)  # best first


class MetricsBackend(Protocol):
    source_name: str

    def query_range(
        self, service: str, metric: str | None, start: datetime, end: datetime, step_seconds: int
    ) -> list[MetricSeries]:
        """Series of `service` (one metric, or all when None) with points in [start, end], at most
        one point per `step_seconds` bucket."""
        ...


class ServiceCatalogueSource(Protocol):
    """A backend that knows which services exist (the metrics and logs backends): the executor
    resolves the names a question uses against the union of their answers before any tool runs."""

    source_name: str

    def service_names(self) -> list[str]:
        """Every service this backend holds data for; BackendError when it cannot say."""
        ...


class LogsBackend(Protocol):
    source_name: str

    def query_range(
        self,
        service: str,
        start: datetime,
        end: datetime,
        levels: Sequence[str] | None,
        contains: str | None,
        limit: int,
    ) -> LogQueryResult:
        """Lines in [start, end] at one of `levels` (a line's level from its level label, else
        from the line: `shared.core.log_levels`) whose message contains `contains` (case-
        insensitive): counted and dated over the whole window, at most `limit` of them returned
        in ascending time order (the oldest and the newest half when more matched)."""
        ...


class ChangesBackend(Protocol):
    source_name: str

    def query_range(
        self, service: str | None, start: datetime, end: datetime, kind: str | None, limit: int
    ) -> ChangeQueryResult:
        """Change records in [start, end] (of one service / one kind when given); the most recent
        `limit` of them, returned in ascending time order."""
        ...


class KnowledgeBackend(Protocol):
    source_name: str

    def search(self, query: str, top_k: int, chunks_per_doc: int) -> list[KnowledgeDocument]:
        """The `top_k` best-ranked documents for `query` (only those that score above zero), each
        with its best-scoring chunks."""
        ...


def utc_now() -> datetime:
    return datetime.now(UTC)


class Unconfigured:
    """Stands in for a backend that was not configured: every call is a clear backend error. A
    tool disabled by the factory is refused by the registry before its backend
    would be reached, so this is only met by a ToolBackends built without the factory."""

    def __init__(self, what: str) -> None:
        self.source_name = f"unconfigured:{what}"
        self._what = what

    def _fail(self, *args: object, **kwargs: object) -> NoReturn:
        raise BackendError(f"no {self._what} backend is configured")

    query_range = _fail
    search = _fail


@dataclass(frozen=True)
class ToolBackends:
    metrics: MetricsBackend
    logs: LogsBackend
    changes: ChangesBackend = field(default_factory=lambda: Unconfigured("changes"))
    knowledge: KnowledgeBackend = field(default_factory=lambda: Unconfigured("knowledge"))
    clock: Callable[[], datetime] = utc_now
    # Evidence tools with no backend of their own while a real backend is configured
    # (backend_factory.py): never called, named in the answer's scope, not a failure.
    disabled: frozenset[str] = frozenset()
    # What every call's request, result and error pass through before they are stored or shown
    # (redacting_store.py): the built-in detectors unless settings say more.
    redactor: Redactor = field(default_factory=Redactor)
