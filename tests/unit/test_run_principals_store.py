"""Runs record their principal, on a real SQLite file and a real PostgreSQL:
the migration from the previous head keeps existing rows (as `default`), and the run store's
paged and counted reads of a run."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import insert, text
from sqlalchemy.engine import make_url

from shared.db.engine import make_engine, make_session_factory
from shared.db.migrate import alembic_config, upgrade
from shared.db.models import Base, ToolInvocationRow
from shared.db.run_store import RunStore

PREVIOUS_HEAD = "0001_initial"


@pytest.fixture()
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'attest.db'}"


@pytest.fixture()
def postgresql_url(postgres_admin_url) -> Iterator[str]:
    name = f"attest_test_{secrets.token_hex(4)}"
    admin = make_engine(postgres_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(postgres_admin_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request) -> str:
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture()
def runs(database_url) -> Iterator[RunStore]:
    upgrade(database_url)
    engine = make_engine(database_url)
    yield RunStore(make_session_factory(engine))
    engine.dispose()


def test_upgrading_a_database_at_the_previous_head_keeps_its_runs_as_the_default_principal(database_url):
    upgrade(database_url, PREVIOUS_HEAD)
    engine = make_engine(database_url)
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO diagnosis_session (session_id, created_at, client_label) "
            "VALUES ('s-old', CURRENT_TIMESTAMP, 'web')"))
        connection.execute(text(
            "INSERT INTO diagnosis_run (run_id, session_id, query, mode, status, created_at, version) "
            "VALUES ('r-old', 's-old', 'payment-service 怎么了？', 'MULTI_AGENT', 'COMPLETED', CURRENT_TIMESTAMP, 0)"))
    upgrade(database_url)
    store = RunStore(make_session_factory(engine))
    try:
        assert store.session_principal("s-old") == "default"
        run = store.get_run("r-old")
        assert run is not None and run["principal"] == "default" and run["query"] == "payment-service 怎么了？"
        # The old session goes on, for its principal, next to a new caller's session.
        store.start_run("s-old", "还有呢？", "MULTI_AGENT", principal="default")
        session_id, run_id = store.start_run(None, "order-service 怎么了？", "MULTI_AGENT", principal="alice")
        assert store.session_principal(session_id) == "alice"
        assert store.get_run(run_id)["principal"] == "alice"
        with engine.connect() as connection:
            assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
            head = ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()
            assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == head
    finally:
        engine.dispose()


def test_unknown_session_has_no_principal(runs):
    assert runs.session_principal("nope") is None
    session_id = runs.create_session("web", principal="bob")
    assert runs.session_principal(session_id) == "bob"
    run_id = runs.create_run(session_id, "checkout-api 怎么了？", "MULTI_AGENT")
    assert runs.get_run(run_id)["principal"] == "bob", "a run takes its session's principal"


def _add_invocations(runs: RunStore, run_id: str, tools: list[tuple[str, str | None]]) -> None:
    with runs._sessions() as session:  # rows as the executor would leave them; the store API is not under test
        session.execute(insert(ToolInvocationRow.__table__), [
            {"run_id": run_id, "tool_call_id": f"c{n}", "tool_name": tool, "round": 0, "lifecycle": "READY",
             "evidence_status": status, "request": {"n": n}, "agent_result": f"line {n}", "error": ""}
            for n, (tool, status) in enumerate(tools)
        ])
        session.commit()


def test_events_and_invocations_are_read_after_a_key_in_order_and_counted(runs):
    _, run_id = runs.start_run(None, "payment-service 怎么了？", "MULTI_AGENT", principal="alice")
    runs.record_events(run_id, [{"node": f"n{i}", "phase": "INFO"} for i in range(7)])
    _add_invocations(runs, run_id, [("query_logs", "EVIDENCE_FOUND")] * 3 + [("query_metrics", "NO_EVIDENCE"),
                                                                            ("get_current_time", None)])
    everything = runs.get_run(run_id)
    assert [e["seq"] for e in runs.events_after(run_id, 0, 3)] == [1, 2, 3]
    assert [e["seq"] for e in runs.events_after(run_id, 5, 10)] == [6, 7]
    ids = [i["invocation_id"] for i in everything["invocations"]]
    assert [i["invocation_id"] for i in runs.invocations_after(run_id, ids[1], 2)] == ids[2:4]
    assert runs.invocations_after(run_id, ids[-1], 5) == []
    assert runs.invocations_after(run_id, 0, 10) == everything["invocations"]

    counts = runs.run_counts(run_id)
    assert counts == {
        "events": 7,
        "invocations": 5,
        "invocations_by_evidence_status": {"EVIDENCE_FOUND": 3, "NO_EVIDENCE": 1, "NONE": 1},
        "invocations_by_tool": {"query_logs": 3, "query_metrics": 1, "get_current_time": 1},
        "invocations_abandoned": 0,
    }
    header = runs.run_header(run_id)
    assert header is not None and "events" not in header and "invocations" not in header
    assert header["principal"] == "alice" and header["self_evaluation"] == {}
    assert runs.run_header("absent") is None
