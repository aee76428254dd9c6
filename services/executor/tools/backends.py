"""The one interface per tool that every backend implements (SQL estate today; Prometheus and
Loki adapters implement the same protocols)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Protocol, Sequence


@dataclass(frozen=True)
class MetricSeries:
    metric: str
    unit: str
    points: list[tuple[datetime, float]]  # ascending by time, timezone-aware UTC


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


class MetricsBackend(Protocol):
    source_name: str

    def query_range(
        self, service: str, metric: str | None, start: datetime, end: datetime, step_seconds: int
    ) -> list[MetricSeries]:
        """Series of `service` (one metric, or all when None) with points in [start, end], at most
        one point per `step_seconds` bucket."""
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


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class ToolBackends:
    metrics: MetricsBackend
    logs: LogsBackend
    clock: Callable[[], datetime] = utc_now
