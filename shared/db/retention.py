"""Retention: delete the runs older than a retention period, with everything
that belongs to them.

    attest purge [--older-than DAYS] [--dry-run]      (python -m shared.db.retention …)

A run is older than the cutoff (now − DAYS) when it ended before it, or, never having ended
(still RUNNING, or abandoned), when it started before it; a run that started after the cutoff
is never touched. With each run go the rows of every table keyed by the run (its tool
invocations and orchestration events; its self-evaluation channels are columns of the run
itself); then the sessions created before the cutoff that are left without any run. Everything
is deleted in one transaction, and the counts are printed per table. `--dry-run` counts the
same rows and deletes nothing. DAYS defaults to ATTEST_RETENTION_DAYS; the database is
ATTEST_DATABASE_URL.

The tables keyed by a run or a session are found from the models' foreign keys, so a table added
later is purged with its run without this module changing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from pydantic import ValidationError
from sqlalchemy import Column, Connection, Engine, Table, and_, delete, func, or_, select
from sqlalchemy import exc as sa_exc

from shared.config import CommonSettings
from shared.db.connectivity import display_url, failure_reason
from shared.db.engine import make_engine
from shared.db.models import Base, RunRow, SessionRow

RUN_TABLE: Table = RunRow.__table__
SESSION_TABLE: Table = SessionRow.__table__
# Ids per IN list: far below SQLite's and PostgreSQL's limits on bound parameters.
_CHUNK = 500


@dataclass(frozen=True)
class PurgeReport:
    cutoff: datetime
    dry_run: bool
    # Table name -> rows deleted (or, in a dry run, that would be), in deletion order.
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        return self.counts.get(RUN_TABLE.name, 0)

    @property
    def sessions(self) -> int:
        return self.counts.get(SESSION_TABLE.name, 0)


def tables_keyed_by(parent: Table) -> list[Table]:
    """Every other table with a foreign key to `parent`, in the models' dependency order."""
    return [
        table for table in Base.metadata.sorted_tables
        if table is not parent and any(key.column.table is parent for key in table.foreign_keys)
    ]


def _key_column(table: Table, parent: Table) -> list[Column[Any]]:
    return [key.parent for key in table.foreign_keys if key.column.table is parent]


def _chunks(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start:start + _CHUNK]


def _expired_runs(connection: Connection, cutoff: datetime) -> list[str]:
    run = RunRow.__table__.c
    ended_before = and_(run.finished_at.is_not(None), run.finished_at < cutoff)
    never_ended_started_before = and_(run.finished_at.is_(None), run.created_at < cutoff)
    query = select(run.run_id).where(or_(ended_before, never_ended_started_before)).order_by(run.run_id)
    return list(connection.execute(query).scalars())


def _orphan_sessions(connection: Connection, cutoff: datetime, purged_runs: Sequence[str]) -> list[str]:
    """Sessions created before the cutoff with no run left once `purged_runs` are gone."""
    session, run = SESSION_TABLE.c, RUN_TABLE.c
    candidates = list(connection.execute(
        select(session.session_id).where(session.created_at < cutoff).order_by(session.session_id)
    ).scalars())
    kept: set[str] = set()
    purged = set(purged_runs)
    for chunk in _chunks(candidates):
        for session_id, run_id in connection.execute(select(run.session_id, run.run_id).where(run.session_id.in_(chunk))):
            if run_id not in purged:
                kept.add(session_id)
    return [session_id for session_id in candidates if session_id not in kept]


def _remove(connection: Connection, table: Table, columns: Iterable[Column[Any]], ids: Sequence[str],
            dry_run: bool) -> int:
    """Rows of `table` whose key (any of `columns`) is in `ids`: counted, and deleted unless a dry run."""
    total = 0
    for column in columns:
        for chunk in _chunks(ids):
            condition = column.in_(chunk)
            if dry_run:
                total += connection.execute(select(func.count()).select_from(table).where(condition)).scalar_one()
            else:
                total += connection.execute(delete(table).where(condition)).rowcount
    return total


def purge(engine: Engine, older_than: timedelta, *, dry_run: bool = False, now: datetime | None = None) -> PurgeReport:
    """Delete (or, with `dry_run`, count) what the module docstring says, in one transaction."""
    cutoff = (now or datetime.now(UTC)) - older_than
    counts: dict[str, int] = {}
    with engine.begin() as connection:
        runs = _expired_runs(connection, cutoff)
        sessions = _orphan_sessions(connection, cutoff, runs)
        for table in reversed(tables_keyed_by(RUN_TABLE)):
            counts[table.name] = _remove(connection, table, _key_column(table, RUN_TABLE), runs, dry_run)
        counts[RUN_TABLE.name] = _remove(connection, RUN_TABLE, [RUN_TABLE.c.run_id], runs, dry_run)
        for table in reversed(tables_keyed_by(SESSION_TABLE)):
            if table is not RUN_TABLE:
                counts[table.name] = _remove(connection, table, _key_column(table, SESSION_TABLE), sessions, dry_run)
        counts[SESSION_TABLE.name] = _remove(connection, SESSION_TABLE, [SESSION_TABLE.c.session_id], sessions, dry_run)
    return PurgeReport(cutoff=cutoff, dry_run=dry_run, counts=counts)


def describe(report: PurgeReport, days: int) -> list[str]:
    """What a person reads: the cutoff, then one `table: count` line per table."""
    stamp = report.cutoff.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    head = (f"dry run, nothing deleted; would delete runs older than {days} days (before {stamp}):" if report.dry_run
            else f"deleted runs older than {days} days (before {stamp}):")
    return [head, *(f"{table}: {count}" for table, count in report.counts.items())]


class _Parser(argparse.ArgumentParser):
    """Bad input is one line on stderr and exit 2 (argparse would print its usage first)."""

    def error(self, message: str) -> NoReturn:
        print(f"error: attest purge: {message}", file=sys.stderr)
        raise SystemExit(2)


def _days(text: str) -> int:
    try:
        days = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"DAYS must be a whole number of days, not {text[:40]!r}") from None
    if days < 1:
        raise argparse.ArgumentTypeError(f"DAYS must be at least 1, not {days}")
    return days


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="attest purge", description="Delete runs older than the retention period, "
                     "with their tool invocations and events, then the sessions left without runs.")
    parser.add_argument("--older-than", type=_days, default=None, metavar="DAYS",
                        help="runs that ended (or, never ended, started) more than DAYS days ago "
                             "(default: ATTEST_RETENTION_DAYS, 30)")
    parser.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
    args = parser.parse_args(argv)
    try:
        settings = CommonSettings()
    except ValidationError as exc:
        first = exc.errors()[0]
        print(f"error: attest purge: setting {'.'.join(str(p) for p in first['loc'])}: {first['msg']}", file=sys.stderr)
        return 2
    days = args.older_than if args.older_than is not None else settings.retention_days
    url = settings.database_url
    try:
        engine = make_engine(url)
    except (sa_exc.ArgumentError, ImportError) as exc:
        print(f"error: attest purge: invalid database URL {display_url(url)}: {failure_reason(exc)}", file=sys.stderr)
        return 1
    try:
        report = purge(engine, timedelta(days=days), dry_run=args.dry_run)
    except sa_exc.SQLAlchemyError as exc:
        print(f"error: attest purge: cannot purge database {display_url(url)}: {failure_reason(exc)}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    print("\n".join(describe(report, days)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
