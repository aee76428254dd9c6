"""Attempts of (run, round) in the store, on a real SQLite file and a real
PostgreSQL. The retry of a lost executor replica's round marks the lost attempt's invocations
abandoned; they stay in the audit, flagged, and nothing cites, counts or charges them; a stale
attempt never writes again."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import insert, select, text

from gateway.rule_evaluation import evaluate_evidence
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore, RunBudget
from shared.db.migrate import upgrade
from shared.db.models import RunRow, ToolInvocationRow, utcnow
from shared.db.run_store import RunStore
from shared.errors import FailedPrecondition, NotFound, ResourceExhausted
from tests.unit.test_db_stores import engine, postgresql_engine, sqlite_engine  # noqa: F401 - fixtures
from tests.unit.test_open_run_writes import _store, run_id, runs  # noqa: F401 - fixtures
from tests.unit.test_run_principals_store import database_url, postgresql_url, sqlite_url  # noqa: F401 - fixtures


def _found(store: InvocationStore, invocation_id: int, text: str = "ERROR pool exhausted") -> None:
    store.complete(invocation_id, evidence_status="EVIDENCE_FOUND", agent_result=text, ref_count=1)


def test_invocations_written_before_attempts_are_attempt_zero_and_current(database_url):  # noqa: F811
    upgrade(database_url, "0002_principals")
    engine = make_engine(database_url)  # noqa: F811 - not the fixture
    try:
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO diagnosis_session (session_id, created_at, client_label) VALUES ('s', CURRENT_TIMESTAMP, '')"))
            connection.execute(text(
                "INSERT INTO diagnosis_run (run_id, session_id, query, mode, status, created_at, version) "
                "VALUES ('r', 's', 'payment-service?', 'MULTI_AGENT', 'RUNNING', CURRENT_TIMESTAMP, 0)"))
            connection.execute(text(
                "INSERT INTO tool_invocation (run_id, tool_call_id, tool_name, round, lifecycle, error, created_at) "
                "VALUES ('r', 'c1', 'query_logs', 0, 'PROJECTING', '', CURRENT_TIMESTAMP)"))
        upgrade(database_url)
        store = _store(engine)
        (old,) = store.list_for_run("r")
        assert (old.attempt, old.abandoned) == (0, False)
        assert store.start_attempt("r", 0, 1) == 1 and store.list_for_run("r") == []
    finally:
        engine.dispose()


def test_attempt_one_abandons_attempt_zero_which_the_audit_keeps_flagged(engine, runs, run_id):  # noqa: F811
    store = _store(engine)
    assert store.start_attempt(run_id, 0, 0) == 0
    lost_done = store.begin(run_id, "c1", "query_logs", 0, {"service": "payment-service"}, attempt=0)
    _found(store, lost_done)
    lost_open = store.begin(run_id, "c2", "query_metrics", 0, {"service": "payment-service"}, attempt=0)
    assert store.start_attempt(run_id, 0, 1) == 2
    retried = store.begin(run_id, "c1", "query_logs", 0, {"service": "payment-service"}, attempt=1)
    _found(store, retried)

    # Readers see the retry only: the same tool call id resolves to one invocation.
    assert [(i.invocation_id, i.attempt, i.abandoned) for i in store.list_for_run(run_id)] == [(retried, 1, False)]
    assert [i.invocation_id for i in store.list_for_run(run_id, "query_logs")] == [retried]
    accounts = store.accounts_for_run(run_id)
    assert len(accounts) == 1 and evaluate_evidence(accounts)["hits"] == 1
    assert store.abandoned_invocation_ids(run_id, [lost_done, lost_open, retried, 999]) == {lost_done, lost_open}
    # The audit shows every row once, the abandoned ones flagged; nothing was deleted.
    audit = runs.get_run(run_id)
    assert audit is not None
    assert [(i["invocation_id"], i["attempt"], i["abandoned"], i["lifecycle"]) for i in audit["invocations"]] == [
        (lost_done, 0, True, "READY"), (lost_open, 0, True, "PROJECTING"), (retried, 1, False, "READY")]
    counts = runs.run_counts(run_id)
    assert counts["invocations"] == 1 and counts["invocations_abandoned"] == 2
    assert counts["invocations_by_tool"] == {"query_logs": 1}


def test_a_stale_attempt_is_refused_and_never_writes_again(engine, runs, run_id):  # noqa: F811
    store = _store(engine)
    store.start_attempt(run_id, 0, 0)
    in_flight = store.begin(run_id, "c1", "query_logs", 0, {}, attempt=0)
    store.start_attempt(run_id, 0, 1)
    before = runs.get_run(run_id)
    with pytest.raises(FailedPrecondition, match=f"attempt 0 of run {run_id} round 0 was superseded by attempt 1"):
        store.begin(run_id, "c9", "query_logs", 0, {}, attempt=0)
    with pytest.raises(FailedPrecondition, match="belongs to an abandoned attempt"):
        _found(store, in_flight, "late evidence")
    with pytest.raises(FailedPrecondition, match="belongs to an abandoned attempt"):
        store.fail(in_flight, "late failure")
    for stale in (0, 1):  # lower than, or equal to, the attempt already started
        with pytest.raises(FailedPrecondition, match=f"attempt {stale} of run {run_id} round 0 is stale: "
                                                     "attempt 1 was already started"):
            store.start_attempt(run_id, 0, stale)
    after = runs.get_run(run_id)
    assert after is not None and before is not None
    assert after["invocations"] == before["invocations"]


def test_attempts_are_per_round(engine, run_id):  # noqa: F811
    store = _store(engine)
    store.start_attempt(run_id, 0, 0)
    round0 = store.begin(run_id, "r0", "query_logs", 0, {}, attempt=0)
    store.start_attempt(run_id, 1, 0)
    store.start_attempt(run_id, 1, 1)  # round 1's retry leaves round 0 alone
    assert [i.invocation_id for i in store.list_for_run(run_id)] == [round0]
    assert store.begin(run_id, "r0b", "query_logs", 0, {}, attempt=0) > round0


def test_a_retry_may_start_without_a_recorded_first_attempt(engine, run_id):  # noqa: F811
    """The replica may die before it recorded attempt 0: attempt 1 starts all the same, and
    whatever attempt 0 began is abandoned."""
    store = _store(engine)
    lost = store.begin(run_id, "c1", "query_logs", 0, {}, attempt=0)
    assert store.start_attempt(run_id, 0, 1) == 1
    assert store.list_for_run(run_id) == []
    assert store.abandoned_invocation_ids(run_id, [lost]) == {lost}


def test_an_attempt_of_a_finished_or_unknown_run_is_refused(engine, runs, run_id):  # noqa: F811
    store = _store(engine)
    with pytest.raises(NotFound, match="run 0123abcd does not exist"):
        store.start_attempt("0123abcd", 0, 0)
    store.start_attempt(run_id, 0, 0)
    done = store.begin(run_id, "c1", "query_logs", 0, {})
    runs.finish_run(run_id, status="FALLBACK")
    with pytest.raises(FailedPrecondition, match="is FALLBACK: a finished run is immutable"):
        store.start_attempt(run_id, 0, 1)
    assert [i.invocation_id for i in store.list_for_run(run_id)] == [done]  # nothing was abandoned


def test_an_abandoned_attempt_is_not_charged_to_the_retry(engine, run_id):  # noqa: F811
    store = _store(engine, RunBudget(max_invocations=2, max_evidence_bytes=100))
    store.start_attempt(run_id, 0, 0)
    for n in range(2):
        _found(store, store.begin(run_id, f"c{n}", "query_logs", 0, {}, attempt=0), "x" * 50)
    with pytest.raises(ResourceExhausted):
        store.require_open(run_id, planned_calls=1)
    store.start_attempt(run_id, 0, 1)
    assert store.require_open(run_id, planned_calls=2).invocations == 0
    for n in range(2):
        _found(store, store.begin(run_id, f"c{n}", "query_logs", 0, {}, attempt=1), "y" * 50)
    assert store.usage(run_id).evidence_bytes == 100
    with pytest.raises(ResourceExhausted, match="used its budget of 2 tool invocations"):
        store.begin(run_id, "c3", "query_logs", 0, {}, attempt=1)


def test_concurrent_starts_of_one_attempt_start_it_once(engine, run_id):  # noqa: F811
    store = _store(engine)
    store.start_attempt(run_id, 0, 0)
    outcomes: list[str] = []
    lock = threading.Lock()

    def start() -> None:
        try:
            store.start_attempt(run_id, 0, 1)
            outcome = "started"
        except FailedPrecondition:
            outcome = "refused"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["refused"] * 5 + ["started"]


def test_a_begin_racing_the_retry_start_is_abandoned_with_its_attempt(postgresql_engine):  # noqa: F811
    """PostgreSQL: a stale replica's begin that holds the run's row when attempt 1 starts makes the
    start wait; once the begin commits, the start marks its invocation abandoned too, so no
    invocation of attempt 0 is left current."""
    pg_runs = RunStore(make_session_factory(postgresql_engine))
    run_id = pg_runs.create_run(pg_runs.create_session("test"), "payment-service 怎么了？", "MULTI_AGENT")  # noqa: F811
    store = _store(postgresql_engine)
    store.start_attempt(run_id, 0, 0)
    started: list[int] = []
    with postgresql_engine.connect() as stale:
        # The stale replica's begin, inside its transaction: the run's row locked as `begin` locks
        # it, then its row written.
        stale.execute(select(RunRow.status).where(RunRow.run_id == run_id).with_for_update(key_share=True)).all()
        stale.execute(insert(ToolInvocationRow).values(
            run_id=run_id, tool_call_id="c1", tool_name="query_logs", round=0, lifecycle="PROJECTING",
            request={}, error="", created_at=utcnow(), attempt=0))

        def retry() -> None:
            started.append(store.start_attempt(run_id, 0, 1))

        retrying = threading.Thread(target=retry)
        retrying.start()
        time.sleep(0.5)
        assert started == [], "the start must wait for the writer holding the run's row"
        stale.commit()
        retrying.join(timeout=10)
    assert started == [1]
    assert store.list_for_run(run_id) == []
    with pytest.raises(FailedPrecondition, match="superseded by attempt 1"):
        store.begin(run_id, "c2", "query_logs", 0, {}, attempt=0)
