"""query_changes: change records of the demo estate as refs, and the guards of the SQL backend —
allowlist, bound parameters, row limit, read-only, statement timeout — on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
import secrets
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from services.executor.estate import (
    DEFAULT_ESTATE_DIR,
    change_record,
    estate_metadata,
    load_estate,
    read_estate_description,
)
from services.executor.tools.backends import BackendError, ToolBackends
from services.executor.tools.changes_backend import (
    ChangeQueryRejected,
    SqlChangesBackend,
    changes_statements,
    read_only_guard,
)
from services.executor.tools.registry import ToolArgumentError, ToolBackendError, build_default_registry
from services.executor.tools.sql_backends import build_sql_backends

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
START, END = "2026-11-29T09:00:00Z", "2026-11-29T11:00:00Z"
CHANGE_TEXT = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) (\S+) (\S+) by (\S+): (.+)$", re.S)
DESCRIPTION = read_estate_description(DEFAULT_ESTATE_DIR)


@pytest.fixture(scope="module")
def estate_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('changes') / 'estate.db'}"
    load_estate(url, DEFAULT_ESTATE_DIR, anchor=ANCHOR)
    return url


@pytest.fixture(scope="module")
def registry(estate_url: str):
    return build_default_registry(build_sql_backends(estate_url))


def _expected_changes(service: str) -> list[tuple[datetime, str, str, str]]:
    """(ts, kind, author, summary) of every change the description gives the service."""
    history = DESCRIPTION.history_minutes
    rows = []
    for incident in DESCRIPTION.incidents:
        for change in incident.changes:
            if (change.service or incident.service) == service:
                minute = history - incident.start_offset_minutes + change.offset_minutes
                rows.append((ANCHOR - timedelta(minutes=history - minute), change.kind, change.author, change.summary))
    for svc in DESCRIPTION.services:
        if svc.name == service:
            rows += [(ANCHOR - timedelta(minutes=c.minutes_ago), c.kind, c.author, c.summary) for c in svc.changes]
    return sorted(rows)


def test_changes_of_a_service_are_refs_in_time_order(registry) -> None:
    service = next(s.name for s in DESCRIPTION.services if len(_expected_changes(s.name)) >= 2)
    result = registry.invoke("query_changes", {"service": service, "start": START, "end": END})
    assert result.evidence_status == "EVIDENCE_FOUND"
    data = json.loads(result.agent_result)
    refs = {ref.raw_path: ref for ref in result.evidence_refs()}
    expected = _expected_changes(service)
    assert data["total_matches"] == data["returned"] == len(expected)
    for k, (ts, kind, author, summary) in enumerate(expected):
        ref = refs[f"changes[{k}]"]
        stamp = ts.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert ref.text == f"{stamp} {kind} {service} by {author}: {summary}"
        assert CHANGE_TEXT.match(ref.text) and ref.timestamp == stamp and ref.source == "changes-sql:change_record"
        assert data["changes"][k] == {"ts": stamp, "service": service, "kind": kind, "author": author, "summary": summary}
    assert refs["summary"].text == f"query_changes service={service} {START}..{END}: {len(expected)} change records"


def test_every_service_kind_filter_and_limit(registry) -> None:
    everything = json.loads(registry.invoke("query_changes", {"start": START, "end": END}).agent_result)
    services = {c["service"] for c in everything["changes"]}
    assert len(services) >= 5 and everything["total_matches"] == everything["returned"]
    deploys = json.loads(registry.invoke("query_changes", {"start": START, "end": END, "kind": "deploy"}).agent_result)
    assert deploys["changes"] and {c["kind"] for c in deploys["changes"]} == {"deploy"}
    limited = registry.invoke("query_changes", {"start": START, "end": END, "limit": 2})
    data = json.loads(limited.agent_result)
    assert [c["ts"] for c in data["changes"]] == [c["ts"] for c in everything["changes"][-2:]]  # the most recent two
    assert {r.raw_path: r.text for r in limited.evidence_refs()}["summary"].endswith(
        f"{everything['total_matches']} change records, 2 most recent returned")


def test_no_change_is_no_evidence_with_one_summary_ref(registry) -> None:
    result = registry.invoke("query_changes", {"service": "never-deployed-svc", "start": START, "end": END, "kind": "config"})
    assert result.evidence_status == "NO_EVIDENCE"
    assert [(r.raw_path, r.text) for r in result.evidence_refs()] == [
        ("summary", f"query_changes service=never-deployed-svc kind=config {START}..{END}: 0 change records")]


@pytest.mark.parametrize("arguments, fragment", [
    ({"start": START}, "end: Field required"),
    ({"start": START, "end": END, "service": "x' OR '1'='1"}, "service: String should match pattern"),
    ({"start": START, "end": END, "kind": "deploy; DROP TABLE change_record"}, "kind: String should match pattern"),
    ({"start": START, "end": END, "limit": 201}, "limit"),
    ({"start": START, "end": END, "sql": "SELECT 1"}, "sql: unexpected argument"),
    ({"start": "2026-10-01T00:00:00Z", "end": END}, "at most 7 days"),
])
def test_arguments_outside_the_schema_are_rejected(registry, arguments: dict, fragment: str) -> None:
    with pytest.raises(ToolArgumentError, match=re.escape(fragment)):
        registry.invoke("query_changes", arguments)


# --- the guards of the SQL backend ---------------------------------------------------------------


def test_only_allowlisted_columns_and_tables_can_be_queried() -> None:
    start, end = ANCHOR - timedelta(hours=1), ANCHOR
    with pytest.raises(ChangeQueryRejected, match="'author' is not allowed"):
        changes_statements({"author": "alice"}, start, end, 10)
    with pytest.raises(ChangeQueryRejected, match="not allowed"):
        changes_statements({"service = service OR 1=1 --": "x"}, start, end, 10)
    with pytest.raises(ChangeQueryRejected, match="limit"):
        changes_statements({}, start, end, 10_000)
    other = Table("tool_invocation", MetaData(), Column("id", Integer), Column("ts", String))
    with pytest.raises(ChangeQueryRejected, match="'tool_invocation' is not allowlisted"):
        changes_statements({}, start, end, 10, table=other)


def test_values_travel_only_as_bound_parameters() -> None:
    hostile = "x' OR '1'='1"
    count, rows = changes_statements({"service": hostile, "kind": "deploy"}, ANCHOR - timedelta(hours=1), ANCHOR, 7)
    for statement in (count, rows):
        compiled = statement.compile(dialect=create_engine("sqlite://").dialect)
        assert hostile not in str(compiled) and "deploy" not in str(compiled)
        assert hostile in compiled.params.values() and "deploy" in compiled.params.values()
    compiled_rows = rows.compile(dialect=create_engine("sqlite://").dialect)
    assert 7 in compiled_rows.params.values()  # the row limit is bound as well
    selected = re.search(r"SELECT (.*?)\s+FROM\s+(\w+)", str(compiled_rows), re.S)
    assert selected.group(2) == "change_record"
    assert [c.strip().split(".")[-1] for c in selected.group(1).split(",")] == ["ts", "service", "kind", "author", "summary"]


def test_a_hostile_value_matches_nothing_and_changes_nothing(estate_url: str) -> None:
    backend = SqlChangesBackend(create_engine(estate_url), timeout_seconds=5)
    before = backend.query_range(None, ANCHOR - timedelta(hours=2), ANCHOR, None, 200).total_matches
    for hostile in ("x' OR '1'='1", "x'; DELETE FROM change_record; --"):
        assert backend.query_range(hostile, ANCHOR - timedelta(hours=2), ANCHOR, None, 200).total_matches == 0
    assert backend.query_range(None, ANCHOR - timedelta(hours=2), ANCHOR, None, 200).total_matches == before > 0


def test_sqlite_statements_inside_the_guard_cannot_write(estate_url: str) -> None:
    engine = create_engine(estate_url)
    with engine.connect() as connection, read_only_guard(connection, 5):
        with pytest.raises(DBAPIError, match="readonly"):
            connection.exec_driver_sql("DELETE FROM change_record")
    with engine.connect() as connection:
        assert connection.execute(select(change_record.c.id)).first() is not None
    engine.dispose()


def _slow_sqlite(tmp_path: Path) -> str:
    """A `change_record` view that takes seconds to evaluate: a real slow statement."""
    url = f"sqlite:///{tmp_path / 'slow.db'}"
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql(
            "CREATE TABLE change_data (id INTEGER PRIMARY KEY, service TEXT, ts DATETIME, kind TEXT, summary TEXT, author TEXT)")
        connection.exec_driver_sql(
            "INSERT INTO change_data VALUES (1, 'a-svc', '2026-11-29 10:30:00.000000', 'deploy', 'v1', 'alice')")
        connection.exec_driver_sql(
            "CREATE VIEW change_record AS "
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50000000) "
            "SELECT c.* FROM change_data c WHERE (SELECT count(*) FROM n) > 0")
    engine.dispose()
    return url


def test_a_slow_sqlite_statement_is_interrupted_at_the_timeout(tmp_path: Path) -> None:
    registry = build_default_registry(ToolBackends(
        metrics=None, logs=None, changes=SqlChangesBackend(create_engine(_slow_sqlite(tmp_path)), timeout_seconds=0.3),  # type: ignore[arg-type]
    ))
    began = time.monotonic()
    with pytest.raises(ToolBackendError, match=r"exceeded the 0.3s statement timeout"):
        registry.invoke("query_changes", {"start": START, "end": END})
    assert time.monotonic() - began < 5


# --- PostgreSQL ---------------------------------------------------------------------------------


@pytest.fixture()
def postgres_changes_url(postgres_admin_url):
    name = f"attest_changes_{secrets.token_hex(4)}"
    admin = create_engine(postgres_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(postgres_admin_url).set(database=name).render_as_string(hide_password=False)
    engine = create_engine(url)
    estate_metadata.create_all(engine, tables=[change_record])
    with engine.begin() as connection:
        connection.execute(change_record.insert(), [
            {"service": "a-svc", "ts": ANCHOR - timedelta(minutes=30), "kind": "deploy", "summary": "a-svc 发布 v2", "author": "alice"},
            {"service": "b-svc", "ts": ANCHOR - timedelta(minutes=10), "kind": "config", "summary": "pool 4 -> 32", "author": "bob"},
        ])
    engine.dispose()
    yield url
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


def test_postgresql_reads_in_a_read_only_transaction_with_a_statement_timeout(postgres_changes_url: str) -> None:
    engine = create_engine(postgres_changes_url)
    backend = SqlChangesBackend(engine, timeout_seconds=0.5)
    result = backend.query_range("a-svc", ANCHOR - timedelta(hours=1), ANCHOR, None, 10)
    assert [(r.service, r.kind, r.author, r.ts) for r in result.records] == [("a-svc", "deploy", "alice", ANCHOR - timedelta(minutes=30))]

    with engine.connect() as connection, read_only_guard(connection, 0.5):
        assert connection.exec_driver_sql("SHOW transaction_read_only").scalar() == "on"
        assert connection.exec_driver_sql("SHOW statement_timeout").scalar() == "500ms"
        with pytest.raises(DBAPIError, match="read-only transaction"):
            connection.exec_driver_sql("DELETE FROM change_record")
    with engine.connect() as connection:  # transaction-local: the next transaction is back to normal
        assert connection.exec_driver_sql("SHOW transaction_read_only").scalar() == "off"

    with engine.begin() as connection:  # make the table a slow view: a real slow statement
        connection.exec_driver_sql("ALTER TABLE change_record RENAME TO change_data")
        connection.exec_driver_sql("CREATE VIEW change_record AS SELECT c.* FROM change_data c, pg_sleep(3)")
    began = time.monotonic()
    with pytest.raises(BackendError, match=r"exceeded the 0.5s statement timeout"):
        backend.query_range(None, ANCHOR - timedelta(hours=1), ANCHOR, None, 10)
    assert time.monotonic() - began < 3
    engine.dispose()
