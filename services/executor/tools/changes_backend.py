"""Change records (deployments, configuration changes) read from a SQL database, read-only.

Guards, each independent of the others:
- allowlist: one table (`change_record`) and its five columns are the only things ever read, and
  only `service` and `kind` can be filtered on; the statement is built with SQLAlchemy Core from
  that table, never from text the caller supplies;
- bound parameters only: every value travels as a bind parameter;
- row limit: at most MAX_CHANGE_ROWS rows per call, whatever is asked;
- read-only and a statement timeout: SQLite connections run with `PRAGMA query_only` and a
  progress handler that interrupts the statement at the deadline; PostgreSQL runs the call in a
  `READ ONLY` transaction with a transaction-local `statement_timeout`.

Any SQLAlchemy URL works whose database has a `change_record` table (or view) with the columns
`id, service, ts, kind, summary, author` (see `services.executor.estate`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Engine,
    Integer,
    Select,
    Table,
    bindparam,
    create_engine,
    func,
    select,
    text,
)
from sqlalchemy.exc import DBAPIError

from services.executor.estate import change_record
from services.executor.tools.backends import BackendError, ChangeQueryResult, ChangeRecord
from shared.core.tool_catalogue import MAX_CHANGE_ROWS

READ_COLUMNS = ("ts", "service", "kind", "author", "summary")
FILTER_COLUMNS = frozenset({"service", "kind"})
ALLOWED_TABLES = frozenset({change_record.name})
# SQLite calls the progress handler every this many virtual-machine instructions.
_PROGRESS_STEPS = 2000


class ChangeQueryRejected(BackendError):
    """A request outside the allowlist (an unknown column or table); nothing was executed."""


def _check_request(filters: Mapping[str, str | None], limit: int, table: Table) -> None:
    """ChangeQueryRejected for a table, a filter column or a limit outside the allowlist."""
    if table.name not in ALLOWED_TABLES:
        raise ChangeQueryRejected(f"table {table.name!r} is not allowlisted")
    unknown = sorted(set(filters) - FILTER_COLUMNS)
    if unknown:
        raise ChangeQueryRejected(f"filter on {', '.join(map(repr, unknown))} is not allowed; allowed: {', '.join(sorted(FILTER_COLUMNS))}")
    if not 1 <= limit <= MAX_CHANGE_ROWS:
        raise ChangeQueryRejected(f"limit must be between 1 and {MAX_CHANGE_ROWS}")


def changes_statements(
    filters: Mapping[str, str | None], start: datetime, end: datetime, limit: int, table: Table = change_record
) -> tuple[Select[Any], Select[Any]]:
    """(count statement, rows statement) for the allowlisted table, filtered on allowlisted
    columns, every value bound. Raises ChangeQueryRejected for anything else."""
    _check_request(filters, limit, table)
    conditions = [table.c.ts >= start, table.c.ts <= end]
    conditions += [table.c[name] == value for name, value in sorted(filters.items()) if value is not None]
    return _shaped(table, conditions, limit)


def _shaped(table: Table, conditions: list[ColumnElement[bool]], limit: int | BindParameter[int]) -> tuple[Select[Any], Select[Any]]:
    """(count, the newest `limit` rows) of the records matching `conditions`."""
    count = select(func.count()).select_from(table).where(*conditions)
    rows = (
        select(*(table.c[name] for name in READ_COLUMNS))
        .where(*conditions)
        .order_by(table.c.ts.desc(), table.c.id.desc())
        .limit(limit)
    )
    return count, rows


@cache
def _bound_rows_with_count(filtered: tuple[str, ...]) -> Select[Any]:
    """The rows statement of `changes_statements` for the filter columns `filtered` (allowlisted,
    sorted), each record carrying the count (a subquery the database evaluates once: one round
    trip). Every value is a named parameter (`start`, `end`, `limit`, each filter's column name),
    so the statement, and its cache key, are built once per set of filters, not per call."""
    table = change_record
    conditions = [table.c.ts >= bindparam("start"), table.c.ts <= bindparam("end")]
    conditions += [table.c[name] == bindparam(name) for name in filtered]
    count, rows = _shaped(table, conditions, bindparam("limit", type_=Integer()))
    return rows.add_columns(count.scalar_subquery())


class SqlChangesBackend:
    source_name = "changes-sql:change_record"

    def __init__(self, engine: Engine, timeout_seconds: float = 10.0) -> None:
        self._engine = engine
        self._timeout = max(0.05, float(timeout_seconds))

    @property
    def engine(self) -> Engine:
        return self._engine

    def query_range(
        self, service: str | None, start: datetime, end: datetime, kind: str | None, limit: int
    ) -> ChangeQueryResult:
        filters = {"service": service, "kind": kind}
        limit = min(limit, MAX_CHANGE_ROWS)
        _check_request(filters, limit, change_record)
        filtered = tuple(name for name, value in sorted(filters.items()) if value is not None)
        values = {"start": start, "end": end, "limit": limit, **{name: filters[name] for name in filtered}}
        # The limit is at least one, so no record returned means none matched.
        try:
            with self._engine.connect() as connection, read_only_guard(connection, self._timeout):
                rows = connection.execute(_bound_rows_with_count(filtered), values).all()
                connection.rollback()  # nothing to commit: leave no transaction behind
        except DBAPIError as exc:
            raise BackendError(_describe(exc, self._timeout)) from exc
        total = rows[0][-1] if rows else 0
        records = [
            ChangeRecord(ts=ts, service=svc, kind=kind_, author=author, summary=summary)
            for ts, svc, kind_, author, summary, _ in rows
        ]
        records.reverse()
        return ChangeQueryResult(total_matches=int(total), records=records)


@contextmanager
def read_only_guard(connection: Connection, timeout: float) -> Iterator[None]:
    """Statements run inside are read-only and interrupted after `timeout` seconds."""
    dialect = connection.dialect.name
    if dialect == "sqlite":
        raw = connection.connection.driver_connection
        assert raw is not None  # a connection checked out of the pool
        connection.exec_driver_sql("PRAGMA query_only = ON")
        deadline = time.monotonic() + timeout
        raw.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, _PROGRESS_STEPS)
        try:
            yield
        finally:
            raw.set_progress_handler(None, 0)
        return
    if dialect == "postgresql":
        # The first statement of the (auto-begun) transaction; both settings end with it.
        connection.exec_driver_sql("SET TRANSACTION READ ONLY")
        connection.execute(text("SELECT set_config('statement_timeout', :ms, true)"), {"ms": str(int(timeout * 1000))})
        yield
        return
    yield  # other dialects: allowlist, bound parameters and the row limit still apply


def _describe(exc: DBAPIError, timeout: float) -> str:
    message = str(exc.orig) if exc.orig is not None else str(exc)
    lowered = message.lower()
    if "interrupted" in lowered or "statement timeout" in lowered or "canceling statement" in lowered:
        return f"change query exceeded the {timeout:g}s statement timeout"
    return f"change query failed: {message.splitlines()[0][:300]}"


def build_changes_backend(url: str, timeout_seconds: float) -> SqlChangesBackend:
    """A changes backend on its own engine, so that its read-only session settings never reach
    another component's connections."""
    return SqlChangesBackend(create_engine(url), timeout_seconds)
