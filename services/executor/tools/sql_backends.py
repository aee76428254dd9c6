"""The embedded backends: metrics, logs and change records read from the estate database through
SQLAlchemy, and the shipped Markdown knowledge directory."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Table, bindparam, func, inspect, select

from services.executor.estate import create_estate_engine, log_line, metric_point, service_catalogue
from services.executor.tools.backends import (
    LogQueryResult,
    LogRecord,
    LogSelection,
    MetricSeries,
    ToolBackends,
    combine_selections,
)
from services.executor.tools.changes_backend import build_changes_backend
from services.executor.tools.knowledge_backend import MarkdownKnowledgeBase
from shared.core.log_levels import LEVELS, UNKNOWN, level_of, spellings

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


# A selection of rows whose level column names no level is read whole up to this many rows (each
# row's level is then read from its line); beyond it, its oldest and newest rows are read.
READ_ALL = 5000
_ANY_LEVEL = spellings(LEVELS)


def _log_conditions(levels: Sequence[str] | None, contains: str | None, labelled: bool | None) -> list[Any]:
    """One service's rows in a window (bound as `service`, `start`, `end`): with an asked level in
    the level column (`labelled` True), with no level there (False: an empty or unknown value), or
    all (None); and whose message contains `contains` (lower-cased, its LIKE wildcards escaped)."""
    conditions = [log_line.c.service == bindparam("service"), log_line.c.ts >= bindparam("start"),
                  log_line.c.ts <= bindparam("end")]
    if labelled is True:
        conditions.append(func.lower(log_line.c.level).in_(spellings(levels or LEVELS)))
    elif labelled is False:
        conditions.append(func.lower(log_line.c.level).not_in(_ANY_LEVEL))
    if contains:
        conditions.append(func.lower(log_line.c.message).contains(contains.lower(), autoescape=True))
    return conditions


def _read_rows(connection: Connection, conditions: list[Any], values: dict[str, Any], limit: int,
               newest: bool) -> list[LogRecord]:
    order = (log_line.c.ts.desc(), log_line.c.id.desc()) if newest else (log_line.c.ts, log_line.c.id)
    query = (select(log_line.c.ts, log_line.c.level, log_line.c.service, log_line.c.host, log_line.c.message)
             .where(*conditions).order_by(*order).limit(limit))
    records = [LogRecord(ts=ts, level=level_of(level, message), service=svc, host=host, message=message)
               for ts, level, svc, host, message in connection.execute(query, values)]
    if newest:
        records.reverse()
    return records


def _count_rows(connection: Connection, conditions: list[Any], values: dict[str, Any]) -> int:
    return int(connection.execute(select(func.count()).select_from(log_line).where(*conditions), values).scalar_one())


def _select_rows(connection: Connection, conditions: list[Any], values: dict[str, Any], limit: int,
                 by_line: bool, read_whole: bool) -> LogSelection:
    """One selection counted, read oldest-first and, when it holds more, newest-first."""
    selected = _count_rows(connection, conditions, values)
    if not selected:
        return LogSelection(selected=0, oldest=[], newest=[], by_line=by_line)
    limit = max(limit, 1)  # the first and the last line date the selection, whatever is returned
    oldest = _read_rows(connection, conditions, values, max(limit, min(selected, READ_ALL)) if read_whole else limit,
                        newest=False)
    newest = _read_rows(connection, conditions, values, limit, newest=True) if selected > len(oldest) else []
    return LogSelection(selected=selected, oldest=oldest, newest=newest, by_line=by_line)


def _unclassified(connection: Connection, values: dict[str, Any]) -> int | None:
    """Rows in the window whose level neither the column nor the line states (None: too many rows
    without a level in the column to read them all)."""
    conditions = _log_conditions(None, None, labelled=False)
    unlabelled = _count_rows(connection, conditions, values)
    if unlabelled > READ_ALL:
        return None
    if not unlabelled:
        return 0
    return sum(r.level == UNKNOWN for r in _read_rows(connection, conditions, values, unlabelled, newest=False))


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
        """The level column is the level label: a row whose column names no level (empty, say) is
        classified from its line (`shared.core.log_levels`)."""
        values: dict[str, Any] = {"service": service, "start": start, "end": end}
        with self._engine.connect() as connection:
            window_lines = _count_rows(connection, _log_conditions(None, None, None), values)
            if not window_lines:
                return LogQueryResult(total_matches=0, records=[], window_lines=0, unclassified_lines=0)
            if levels:
                selections = [
                    _select_rows(connection, _log_conditions(levels, contains, labelled=True), values, limit,
                                 by_line=False, read_whole=False),
                    _select_rows(connection, _log_conditions(levels, contains, labelled=False), values, limit,
                                 by_line=True, read_whole=True),
                ]
            else:
                selections = [_select_rows(connection, _log_conditions(None, contains, None), values, limit,
                                           by_line=True, read_whole=False)]
            unclassified = _unclassified(connection, values)
        return combine_selections(selections, levels, limit, window_lines, unclassified)


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
