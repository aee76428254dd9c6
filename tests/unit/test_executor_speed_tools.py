"""Property: the tools' faster paths give what the code they replaced gave. The replaced
code is kept below as the oracle (copied): the hand-formatted timestamp, and the estate backends'
statements built on every call with the values inlined, the log count read by a statement of its
own (the statements are now built once, every value bound, and each line carries the count), and
the change records with their count read apart, run against the demo estate on SQLite and on
PostgreSQL, limits of none included. The series assessment is
now remembered by its values' bits; its oracle is the same assessment computed afresh. A
sample's step bucket is now the floor of two timedeltas' quotient, not of the float of their
seconds; its oracle is the float version. The estate's log reads changed meaning since (every
level, rows without a level read from the line, oldest and newest halves, whole-window counts):
their oracle reads every row of the window and judges it in Python."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from gateway.launcher import REPO_ROOT
from services.executor.estate import create_estate_engine, load_estate, log_line, metric_point
from services.executor.tools.backends import ChangeQueryResult, ChangeRecord, LogQueryResult, LogRecord
from services.executor.tools.changes_backend import SqlChangesBackend, changes_statements
from services.executor.tools.sql_backends import SqlLogsBackend, SqlMetricsBackend, _one_per_step
from services.executor.tools.tool_result import iso_utc
from shared.core import metric_anomaly
from shared.core.log_levels import UNKNOWN, level_of, normalise_level
from shared.core.metric_anomaly import assess_series
from tests.unit.test_db_stores import engine, postgresql_engine, sqlite_engine  # noqa: F401 - fixtures

# --- oracle: the replaced code ---------------------------------------------------------------------


def oracle_iso_utc(moment: datetime) -> str:
    if moment.tzinfo is not UTC:
        moment = moment.astimezone(UTC)
    return (f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
            f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}Z")


def oracle_one_per_step(points: list[tuple[datetime, float]], start: datetime,
                        step_seconds: int) -> list[tuple[datetime, float]]:
    buckets: dict[int, tuple[datetime, float]] = {}
    for ts, value in points:
        key = int((ts - start).total_seconds() // step_seconds)
        kept = buckets.get(key)
        if kept is None or value > kept[1]:
            buckets[key] = (ts, value)
    return [buckets[key] for key in sorted(buckets)]


def oracle_metrics(engine_: Any, service: str, metric: str | None, start: datetime, end: datetime,
                   step_seconds: int) -> list[tuple[Any, ...]]:
    query = (
        select(metric_point.c.metric, metric_point.c.unit, metric_point.c.ts, metric_point.c.value)
        .where(metric_point.c.service == service, metric_point.c.ts >= start, metric_point.c.ts <= end)
        .order_by(metric_point.c.metric, metric_point.c.ts)
    )
    if metric is not None:
        query = query.where(metric_point.c.metric == metric)
    with engine_.connect() as connection:
        rows = connection.execute(query).all()
    grouped: dict[str, tuple[str, list[tuple[datetime, float]]]] = {}
    for name, unit, ts, value in rows:
        grouped.setdefault(name, (unit, []))[1].append((ts, float(value)))
    return [(name, unit, oracle_one_per_step(points, start, step_seconds)) for name, (unit, points) in grouped.items()]


def oracle_logs(engine_: Any, service: str, start: datetime, end: datetime, levels: list[str] | None,
                contains: str | None, limit: int) -> LogQueryResult:
    """Every row of the window read and judged in Python: its level the column's when it names one,
    else the line's; the oldest ceil(limit/2) and newest floor(limit/2) of the matching rows."""
    columns = (log_line.c.ts, log_line.c.level, log_line.c.service, log_line.c.host, log_line.c.message)
    window = [log_line.c.service == service, log_line.c.ts >= start, log_line.c.ts <= end]
    with engine_.connect() as connection:
        rows = connection.execute(select(*columns).where(*window).order_by(log_line.c.ts, log_line.c.id)).all()
    records = [LogRecord(ts=ts, level=level_of(level, message), service=svc, host=host, message=message)
               for ts, level, svc, host, message in rows]
    unclassified = sum(1 for (_, level, *_), r in zip(rows, records, strict=True)
                       if normalise_level(level) is None and r.level == UNKNOWN)
    matching = [r for r in records
                if (not levels or r.level in levels) and (not contains or contains.lower() in r.message.lower())]
    newest = limit // 2
    sample = matching if len(matching) <= limit else matching[: limit - newest] + (matching[-newest:] if newest else [])
    return LogQueryResult(
        total_matches=len(matching), records=sample, window_lines=len(records), unclassified_lines=unclassified,
        first_ts=matching[0].ts if matching else None, last_ts=matching[-1].ts if matching else None,
    )


def oracle_changes(engine_: Any, service: str | None, start: datetime, end: datetime, kind: str | None,
                   limit: int) -> ChangeQueryResult:
    count_statement, rows_statement = changes_statements({"service": service, "kind": kind}, start, end, limit)
    with engine_.connect() as connection:
        total = connection.execute(count_statement).scalar_one()
        rows = connection.execute(rows_statement).all()
    records = [ChangeRecord(ts=ts, service=svc, kind=kind_, author=author, summary=summary)
               for ts, svc, kind_, author, summary in rows]
    records.reverse()
    return ChangeQueryResult(total_matches=int(total), records=records)


# --- timestamps and assessments ---------------------------------------------------------------------

ZONES = st.sampled_from([UTC, timezone(timedelta(0)), timezone(timedelta(hours=8)), timezone(timedelta(hours=-5, minutes=-30))])
MOMENTS = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=ZONES)


@settings(max_examples=500, deadline=None)
@given(MOMENTS)
def test_a_timestamp_is_spelled_as_before(moment: datetime) -> None:
    for _ in range(2):  # fresh, then remembered
        assert iso_utc(moment) == oracle_iso_utc(moment)


SAMPLE_TIMES = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=ZONES)


@settings(max_examples=500, deadline=None)
@given(SAMPLE_TIMES, st.lists(st.tuples(st.integers(-10**6, 10**15), st.floats(allow_nan=False) | st.integers(-3, 3)),
                              max_size=60),
       st.integers(1, 86400) | st.sampled_from([15, 60, 300]))
def test_the_points_kept_per_step_are_the_replaced_ones(start: datetime, offsets: list[tuple[int, float]],
                                                         step: int) -> None:
    """Samples at any microsecond around the window's start (some before it), in any zone, ties
    and repeated instants included."""
    points = sorted(((start + timedelta(microseconds=us), float(v)) for us, v in offsets), key=lambda p: p[0])
    assert _one_per_step(points, start, step) == oracle_one_per_step(points, start, step)


VALUES = st.lists(st.floats(-1e9, 1e9) | st.sampled_from([0.0, -0.0, 1.0, 90.0, math.nan, math.inf, -math.inf])
                  | st.integers(-5, 100), max_size=40)


def _outcome(assess: Any, metric: str, unit: str, values: list[Any]) -> str:
    """The assessment's repr (NaN equals itself there), or the error it raised."""
    try:
        return repr(assess(metric, unit, values))
    except (ValueError, ArithmeticError) as exc:
        return f"{type(exc).__name__}: {exc}"


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["cpu_usage_percent", "http_5xx_rate", "latency_p99_seconds", "queue_depth"]),
       st.sampled_from(["percent", "ratio", "seconds", ""]), VALUES)
def test_a_remembered_assessment_is_the_computed_one(metric: str, unit: str, values: list[Any]) -> None:
    floats = [float(v) for v in values]
    flipped = [-0.0 if v == 0 else v for v in floats]  # the same values as floats, other bits
    for series in (values, floats, flipped):
        expected = _outcome(metric_anomaly._assess, metric, unit, list(series))
        for _ in range(2):  # fresh, then remembered
            assert _outcome(assess_series, metric, unit, series) == expected


# --- the estate's statements ---------------------------------------------------------------------

ANCHOR = datetime(2026, 12, 1, 14, 0, tzinfo=UTC)


@pytest.fixture()
def estate(engine: Any) -> Any:  # noqa: F811 - the fixture
    url = engine.url.render_as_string(hide_password=False)
    load_estate(url, REPO_ROOT / "demo" / "estate", anchor=ANCHOR)
    estate_engine = create_estate_engine(url)
    yield estate_engine
    estate_engine.dispose()


SERVICES = st.sampled_from(["payment-service", "order-service", "checkout-service", "no-such-service"])
WINDOWS = st.tuples(st.integers(-240, 0), st.integers(1, 180)).map(
    lambda w: (ANCHOR + timedelta(minutes=w[0]) - timedelta(minutes=w[1]), ANCHOR + timedelta(minutes=w[0])))
LEVELS = st.none() | st.lists(st.sampled_from(["ERROR", "WARN", "INFO", "DEBUG", "FATAL"]), min_size=1, max_size=3, unique=True)
CONTAINS = st.none() | st.sampled_from(["", "timeout", "TIMEOUT", "ruleSet=v5", "%", "_", "/", "a%b", "连接", "x_y/z"])
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"], indirect=True)
@SETTINGS
@given(SERVICES, WINDOWS, LEVELS, CONTAINS, st.integers(0, 300))
def test_the_logs_read_are_the_replaced_statements(estate: Any, service: str, window: tuple[datetime, datetime],
                                                   levels: list[str] | None, contains: str | None, limit: int) -> None:
    start, end = window
    read = SqlLogsBackend(estate).query_range(service, start, end, levels, contains, limit)
    assert read == oracle_logs(estate, service, start, end, levels, contains, limit)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"], indirect=True)
@SETTINGS
@given(SERVICES, st.none() | st.sampled_from(["cpu_usage_percent", "http_5xx_rate", "no_such_metric"]), WINDOWS,
       st.sampled_from([15, 60, 300]))
def test_the_metrics_read_are_the_replaced_statements(estate: Any, service: str, metric: str | None,
                                                      window: tuple[datetime, datetime], step: int) -> None:
    start, end = window
    read = SqlMetricsBackend(estate).query_range(service, metric, start, end, step)
    assert [(s.metric, s.unit, s.points) for s in read] == oracle_metrics(estate, service, metric, start, end, step)
    assert all(not math.isnan(v) for s in read for _, v in s.points)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"], indirect=True)
@SETTINGS
@given(st.none() | SERVICES, WINDOWS, st.none() | st.sampled_from(["deploy", "config", "rollback"]), st.integers(1, 60))
def test_the_changes_read_are_the_replaced_statements(estate: Any, service: str | None, window: tuple[datetime, datetime],
                                                      kind: str | None, limit: int) -> None:
    start = window[0] - timedelta(hours=20)  # change records are sparse: wide windows too
    read = SqlChangesBackend(estate).query_range(service, start, window[1], kind, limit)
    assert read == oracle_changes(estate, service, start, window[1], kind, limit)
