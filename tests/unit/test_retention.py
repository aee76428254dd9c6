"""`attest purge` on a real SQLite file and a real PostgreSQL, schema from the
migrations: runs older than the retention period go with every row keyed by them, then the
sessions left without runs; young runs, runs still RUNNING that started after the cutoff and
runs that ended after it stay; a dry run deletes nothing; bad input is one line and exit 2."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select, text
from sqlalchemy.engine import make_url

from shared.db.engine import make_engine
from shared.db.migrate import upgrade
from shared.db.models import ExecutorAttemptRow, OrchestrationEventRow, RunRow, SessionRow, ToolInvocationRow
from shared.db.retention import purge, tables_keyed_by

REPO_ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RETENTION = timedelta(days=30)


@pytest.fixture()
def sqlite_engine(tmp_path):
    url = f"sqlite:///{tmp_path / 'attest.db'}"
    upgrade(url)
    engine = make_engine(url)
    engine.url_for_cli = url  # type: ignore[attr-defined]
    yield engine
    engine.dispose()


@pytest.fixture()
def postgresql_engine(postgres_admin_url):
    name = f"attest_purge_{secrets.token_hex(4)}"
    admin = make_engine(postgres_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(postgres_admin_url).set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    engine = make_engine(url)
    engine.url_for_cli = url  # type: ignore[attr-defined]
    yield engine
    engine.dispose()
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request):
    return request.getfixturevalue(f"{request.param}_engine")


def _session(engine, session_id: str, created_days_ago: float, now: datetime) -> None:
    with engine.begin() as connection:
        connection.execute(insert(SessionRow.__table__).values(
            session_id=session_id, created_at=now - timedelta(days=created_days_ago)))


def _run(engine, run_id: str, session_id: str, now: datetime, *, started_days_ago: float,
         ended_days_ago: float | None, calls: int = 2, events: int = 3) -> None:
    """A run with its tool invocations, its executor attempt and orchestration events (and a
    self-evaluation channel)."""
    def _ago(days: float) -> datetime:
        return now - timedelta(days=days)

    finished = None if ended_days_ago is None else _ago(ended_days_ago)
    with engine.begin() as connection:
        connection.execute(insert(RunRow.__table__).values(
            run_id=run_id, session_id=session_id, query="why?", mode="MULTI_AGENT",
            status="RUNNING" if finished is None else "COMPLETED", created_at=_ago(started_days_ago),
            finished_at=finished, self_evaluation={"rule_evaluation": {"evidence_calls": calls}},
        ))
        for number in range(calls):
            connection.execute(insert(ToolInvocationRow.__table__).values(
                run_id=run_id, tool_call_id=f"c{number}", tool_name="query_logs", lifecycle="READY",
                request={"tool": "query_logs"}, agent_result="{}", created_at=_ago(started_days_ago),
            ))
        connection.execute(insert(ExecutorAttemptRow.__table__).values(
            run_id=run_id, round=0, attempt=0, started_at=_ago(started_days_ago)))
        for seq in range(1, events + 1):
            connection.execute(insert(OrchestrationEventRow.__table__).values(
                run_id=run_id, seq=seq, node="executor", phase="INFO", created_at=_ago(started_days_ago),
            ))


def _estate(engine, now: datetime = NOW) -> None:
    _session(engine, "s-old", 41, now)  # only old runs: goes with them
    _run(engine, "r-old-finished", "s-old", now, started_days_ago=40, ended_days_ago=40)
    _run(engine, "r-old-abandoned", "s-old", now, started_days_ago=35, ended_days_ago=None, calls=1, events=1)
    _session(engine, "s-mixed", 50, now)  # an old run and a young one: the session stays
    _run(engine, "r-mixed-old", "s-mixed", now, started_days_ago=45, ended_days_ago=44, calls=3, events=2)
    _run(engine, "r-mixed-young", "s-mixed", now, started_days_ago=2, ended_days_ago=2)
    _session(engine, "s-young", 1, now)
    _run(engine, "r-running", "s-young", now, started_days_ago=0.01, ended_days_ago=None)
    _run(engine, "r-ended-late", "s-young", now, started_days_ago=31, ended_days_ago=29)  # ended after the cutoff
    _session(engine, "s-empty-old", 60, now)  # never had a run
    _session(engine, "s-empty-young", 0.001, now)  # created a moment ago, its first run not yet written


def _ids(engine, table, column) -> set[str]:
    with engine.connect() as connection:
        return set(connection.execute(select(column)).scalars())


def _rows_of(engine, run_ids: set[str]) -> int:
    with engine.connect() as connection:
        return sum(connection.execute(select(func.count()).select_from(table).where(table.c.run_id.in_(run_ids)))
                   .scalar_one() for table in (ToolInvocationRow.__table__, OrchestrationEventRow.__table__,
                                               ExecutorAttemptRow.__table__))


def test_old_runs_go_with_all_their_rows_and_young_or_running_ones_stay(engine) -> None:
    _estate(engine)
    report = purge(engine, RETENTION, now=NOW)

    gone = {"r-old-finished", "r-old-abandoned", "r-mixed-old"}
    assert _ids(engine, RunRow, RunRow.run_id) == {"r-mixed-young", "r-running", "r-ended-late"}
    assert _rows_of(engine, gone) == 0
    assert _rows_of(engine, {"r-mixed-young", "r-running", "r-ended-late"}) == 3 * (2 + 3 + 1)
    assert _ids(engine, SessionRow, SessionRow.session_id) == {"s-mixed", "s-young", "s-empty-young"}
    assert report.cutoff == NOW - RETENTION and not report.dry_run
    assert report.counts == {"orchestration_event": 3 + 1 + 2, "tool_invocation": 2 + 1 + 3,
                             "executor_attempt": 3, "diagnosis_run": 3, "diagnosis_session": 2}

    again = purge(engine, RETENTION, now=NOW)
    assert set(again.counts.values()) == {0}


def test_a_dry_run_counts_the_same_rows_and_deletes_nothing(engine) -> None:
    _estate(engine)
    runs_before = _ids(engine, RunRow, RunRow.run_id)
    dry = purge(engine, RETENTION, now=NOW, dry_run=True)
    assert dry.dry_run and _ids(engine, RunRow, RunRow.run_id) == runs_before
    assert _rows_of(engine, runs_before) == (2 + 3 + 1) * 4 + (1 + 1 + 1) + (3 + 2 + 1)
    assert len(_ids(engine, SessionRow, SessionRow.session_id)) == 5
    assert purge(engine, RETENTION, now=NOW).counts == dry.counts


def test_every_table_keyed_by_a_run_is_purged() -> None:
    assert {table.name for table in tables_keyed_by(RunRow.__table__)} >= {"tool_invocation", "orchestration_event"}


# --- the command ----------------------------------------------------------------------------------


def _attest(*args: str, url: str, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("ATTEST_")}
    environment.update({"ATTEST_DATABASE_URL": url, "PYTHONPATH": f"{REPO_ROOT}:{REPO_ROOT / 'gen'}", **env})
    return subprocess.run([sys.executable, "-m", "gateway.cli", "purge", *args], cwd=REPO_ROOT, env=environment,
                          capture_output=True, text=True, timeout=60, check=False)


def _real_now_estate(engine) -> None:
    """The estate around the real clock's now (the command reads the clock)."""
    _estate(engine, datetime.now(UTC))


def test_attest_purge_prints_what_it_deleted(sqlite_engine) -> None:
    _real_now_estate(sqlite_engine)
    url = sqlite_engine.url_for_cli
    dry = _attest("--older-than", "30", "--dry-run", url=url)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("dry run, nothing deleted; would delete runs older than 30 days (before ")
    assert len(_ids(sqlite_engine, RunRow, RunRow.run_id)) == 6

    done = _attest("--older-than", "30", url=url)
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0].startswith("deleted runs older than 30 days (before ")
    assert lines[1:] == ["tool_invocation: 6", "orchestration_event: 6", "executor_attempt: 3", "diagnosis_run: 3",
                         "diagnosis_session: 2"]
    assert dry.stdout.splitlines()[1:] == lines[1:]


def test_the_retention_setting_is_the_default(sqlite_engine) -> None:
    _real_now_estate(sqlite_engine)
    done = _attest("--dry-run", url=sqlite_engine.url_for_cli, ATTEST_RETENTION_DAYS="3")
    assert done.returncode == 0, done.stderr
    assert "older than 3 days" in done.stdout.splitlines()[0]
    # Ended (or, never ended, started) more than 3 days ago: all but the young mixed run and the running one.
    assert "diagnosis_run: 4" in done.stdout.splitlines()


@pytest.mark.parametrize(("args", "message"), [
    (("--older-than", "abc"), "error: attest purge: argument --older-than: DAYS must be a whole number of days, not 'abc'"),
    (("--older-than", "0"), "error: attest purge: argument --older-than: DAYS must be at least 1, not 0"),
    (("--older-than",), "error: attest purge: argument --older-than: expected one argument"),
    (("--everything",), "error: attest purge: unrecognized arguments: --everything"),
])
def test_bad_input_is_one_line_and_a_non_zero_exit(sqlite_engine, args, message) -> None:
    _real_now_estate(sqlite_engine)
    done = _attest(*args, url=sqlite_engine.url_for_cli)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [message]
    assert len(_ids(sqlite_engine, RunRow, RunRow.run_id)) == 6


def test_an_unusable_database_is_one_line_without_its_password(tmp_path) -> None:
    done = _attest("--older-than", "30", url="postgresql+psycopg://app:hunter2@127.0.0.1:1/attest")
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: attest purge: cannot purge database postgresql+psycopg://app:***@127.0.0.1:1/attest: ")
    assert "hunter2" not in done.stderr
