"""The one interface per tool that every backend implements: the SQL estate (the embedded
default), Prometheus and Loki for metrics and logs, a Markdown directory for knowledge and any
SQLAlchemy database for change records."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

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
    records: list[LogRecord] = field(default_factory=list)  # ascending by time, at most `limit`


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
        """Lines in [start, end] at one of `levels` whose message contains `contains` (case-
        insensitive); the most recent `limit` of them, returned in ascending time order."""
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
    tool disabled by the factory (issue 16, point 5) is refused by the registry before its backend
    would be reached, so this is only met by a ToolBackends built without the factory."""

    def __init__(self, what: str) -> None:
        self.source_name = f"unconfigured:{what}"
        self._what = what

    def _fail(self, *args: object, **kwargs: object):
        raise BackendError(f"no {self._what} backend is configured")

    query_range = _fail
    search = _fail


@dataclass(frozen=True)
class ToolBackends:
    metrics: MetricsBackend
    logs: LogsBackend
    changes: ChangesBackend = field(default_factory=lambda: Unconfigured("changes"))  # type: ignore[assignment]
    knowledge: KnowledgeBackend = field(default_factory=lambda: Unconfigured("knowledge"))  # type: ignore[assignment]
    clock: Callable[[], datetime] = utc_now
    # Evidence tools with no backend of their own while a real backend is configured (issue 16,
    # point 5; backend_factory.py): never called, named in the answer's scope, not a failure.
    disabled: frozenset[str] = frozenset()
    # What every call's request, result and error pass through before they are stored or shown
    # (issue 20, point 6; redacting_store.py): the built-in detectors unless settings say more.
    redactor: Redactor = field(default_factory=Redactor)
