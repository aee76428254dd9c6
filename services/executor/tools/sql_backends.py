"""The embedded backends: metrics, logs and change records read from the estate database through
SQLAlchemy, and the shipped Markdown knowledge directory."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, Select, Table, bindparam, func, inspect, select

from services.executor.estate import create_estate_engine, log_line, metric_point, service_catalogue
from services.executor.tools.backends import LogQueryResult, LogRecord, MetricSeries, ToolBackends
from services.executor.tools.changes_backend import build_changes_backend
from services.executor.tools.knowledge_backend import MarkdownKnowledgeBase

DEFAULT_KNOWLEDGE_DIR = Path(__file__).resolve().parents[3] / "demo" / "knowledge"


def estate_service_names(engine: Engine, data_table: Table) -> list[str]:
    """The estate's catalogue of services: its `service` table, or (an estate written before that
    table existed, or one filled by hand) the services `data_table` holds rows for."""
    with engine.connect() as connection:
        if inspect(connection).has_table(service_catalogue.name):
            names = connection.execute(select(service_catalogue.c.name)).scalars().all()
            if names:
                return sorted(names)
        return sorted(connection.execute(select(data_table.c.service).distinct()).scalars().all())


# The backends' statements are built once (their cache keys too), every value bound per call.
_METRICS = (
    select(metric_point.c.metric, metric_point.c.unit, metric_point.c.ts, metric_point.c.value)
    .where(metric_point.c.service == bindparam("service"), metric_point.c.ts >= bindparam("start"),
           metric_point.c.ts <= bindparam("end"))
    .order_by(metric_point.c.metric, metric_point.c.ts)
)
_ONE_METRIC = _METRICS.where(metric_point.c.metric == bindparam("metric"))


def _log_statements(levels: bool, contains: str | None) -> tuple[Select[Any], Select[Any]]:
    """(count, most recent lines) of one service's log lines in a window, filtered by level
    (`levels`: bound as `levels`) and by a lower-cased substring of the message (`contains`: its
    LIKE wildcards escaped, which needs the value itself, so such statements are built per call)."""
    conditions = [log_line.c.service == bindparam("service"), log_line.c.ts >= bindparam("start"),
                  log_line.c.ts <= bindparam("end")]
    if levels:
        conditions.append(log_line.c.level.in_(bindparam("levels", expanding=True)))
    if contains:
        conditions.append(func.lower(log_line.c.message).contains(contains.lower(), autoescape=True))
    count_query = select(func.count()).select_from(log_line).where(*conditions)
    # Each line carries the count (a subquery the database evaluates once): one round trip.
    lines_query = (
        select(log_line.c.ts, log_line.c.level, log_line.c.service, log_line.c.host, log_line.c.message,
               count_query.scalar_subquery())
        .where(*conditions)
        .order_by(log_line.c.ts.desc(), log_line.c.id.desc())
        .limit(bindparam("limit"))
    )
    return count_query, lines_query


_LOG_STATEMENTS = {levels: _log_statements(levels, None) for levels in (False, True)}


class SqlMetricsBackend:
    source_name = "estate-sql:metric_point"

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def service_names(self) -> list[str]:
        return estate_service_names(self._engine, metric_point)

    def query_range(
        self, service: str, metric: str | None, start: datetime, end: datetime, step_seconds: int
    ) -> list[MetricSeries]:
        query, values = _METRICS, {"service": service, "start": start, "end": end}
        if metric is not None:
            query, values["metric"] = _ONE_METRIC, metric
        with self._engine.connect() as connection:
            rows = connection.execute(query, values).all()

        grouped: dict[str, tuple[str, list[tuple[datetime, float]]]] = {}
        for name, unit, ts, value in rows:
            series = grouped.get(name)
            if series is None:  # a series' unit is its first row's
                series = grouped[name] = (unit, [])
            series[1].append((ts, float(value)))
        return [
            MetricSeries(metric=name, unit=unit, points=_one_per_step(points, start, step_seconds))
            for name, (unit, points) in grouped.items()
        ]


def _one_per_step(points: list[tuple[datetime, float]], start: datetime, step_seconds: int) -> list[tuple[datetime, float]]:
    """Keep the largest stored sample of each step bucket, with its own timestamp, so that peaks
    survive downsampling and every point shown is a real stored sample."""
    buckets: dict[int, tuple[datetime, float]] = {}
    step = timedelta(seconds=step_seconds)
    for ts, value in points:
        # The exact floor of two timedeltas' quotient: what the float of the seconds gave, for any
        # window under 285 years (beyond that a float no longer holds every microsecond).
        key = (ts - start) // step
        kept = buckets.get(key)
        if kept is None or value > kept[1]:
            buckets[key] = (ts, value)
    return [buckets[key] for key in sorted(buckets)]


class SqlLogsBackend:
    source_name = "estate-sql:log_line"

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def service_names(self) -> list[str]:
        return estate_service_names(self._engine, log_line)

    def query_range(
        self,
        service: str,
        start: datetime,
        end: datetime,
        levels: Sequence[str] | None,
        contains: str | None,
        limit: int,
    ) -> LogQueryResult:
        values: dict[str, Any] = {"service": service, "start": start, "end": end, "limit": limit}
        if levels:
            values["levels"] = list(levels)
        count_query, lines_query = (_log_statements(bool(levels), contains) if contains
                                    else _LOG_STATEMENTS[bool(levels)])
        with self._engine.connect() as connection:
            rows = connection.execute(lines_query, values).all()
            # No line returned: none matched, unless the limit returns none (then count them).
            total = rows[0][5] if rows else 0 if limit >= 1 else connection.execute(count_query, values).scalar_one()
        records = [LogRecord(ts=ts, level=level, service=svc, host=host, message=message)
                   for ts, level, svc, host, message, _ in rows]
        records.reverse()
        return LogQueryResult(total_matches=int(total), records=records)


def build_sql_backends(
    url: str, knowledge_dir: str | Path = DEFAULT_KNOWLEDGE_DIR, timeout_seconds: float = 10.0
) -> ToolBackends:
    """Backends over the estate database at `url` (see `services.executor.estate`) and the
    Markdown knowledge directory."""
    engine = create_estate_engine(url)
    return ToolBackends(
        metrics=SqlMetricsBackend(engine),
        logs=SqlLogsBackend(engine),
        changes=build_changes_backend(url, timeout_seconds),
        knowledge=MarkdownKnowledgeBase(knowledge_dir),
    )
