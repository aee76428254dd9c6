"""Open runs in the store: tool invocations are written only into an open run, within its
budget, on a real SQLite file and a real PostgreSQL. A finished run is immutable whoever writes
and whenever: even a write racing the gateway finishing the run."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import update

from shared.db.engine import make_session_factory
from shared.db.invocation_store import InvocationStore, RunBudget
from shared.db.models import RunRow
from shared.db.run_store import RunStore
from shared.errors import FailedPrecondition, NotFound, ResourceExhausted
from tests.unit.test_db_stores import engine, postgresql_engine, sqlite_engine  # noqa: F401 - fixtures

FINAL_STATUSES = ("COMPLETED", "FALLBACK", "FAILED", "CANCELLED")


@pytest.fixture()
def runs(engine) -> RunStore:  # noqa: F811 - the fixture
    return RunStore(make_session_factory(engine))


@pytest.fixture()
def run_id(runs) -> str:
    return runs.create_run(runs.create_session("test"), "payment-service 怎么了？", "MULTI_AGENT")


def _store(engine, budget: RunBudget | None = None) -> InvocationStore:  # noqa: F811 - the fixture
    return InvocationStore(make_session_factory(engine), budget)


def _snapshot(store: InvocationStore, run_id: str) -> list[dict]:
    return [invocation.model_dump() for invocation in store.list_for_run(run_id)]


@pytest.mark.parametrize("status", FINAL_STATUSES)
def test_a_finished_run_refuses_new_invocations_and_keeps_its_own(engine, runs, run_id, status):  # noqa: F811
    store = _store(engine)
    done = store.complete(store.begin(run_id, "c1", "query_logs", 0, {"service": "payment-service"}),
                          evidence_status="EVIDENCE_FOUND", agent_result="ERROR pool exhausted", ref_count=1)
    runs.finish_run(run_id, status=status)
    before = _snapshot(store, run_id)
    with pytest.raises(FailedPrecondition, match=f"run {run_id} is {status}: a finished run is immutable"):
        store.begin(run_id, "c2", "query_metrics", 1, {"service": "payment-service"})
    with pytest.raises(FailedPrecondition):
        store.require_open(run_id)
    assert _snapshot(store, run_id) == before
    assert [i.invocation_id for i in store.list_for_run(run_id)] == [done.invocation_id]


def test_a_call_in_flight_when_the_run_finishes_is_never_completed(engine, runs, run_id):  # noqa: F811
    store = _store(engine)
    completing = store.begin(run_id, "c1", "query_logs", 0, {})
    failing = store.begin(run_id, "c2", "query_metrics", 0, {})
    runs.finish_run(run_id, status="FALLBACK")
    before = _snapshot(store, run_id)
    with pytest.raises(FailedPrecondition, match="FALLBACK"):
        store.complete(completing, evidence_status="EVIDENCE_FOUND", agent_result="late evidence", ref_count=1)
    with pytest.raises(FailedPrecondition, match="FALLBACK"):
        store.fail(failing, "late failure")
    assert _snapshot(store, run_id) == before
    # Ending the run closed both: no invocation stays PROJECTING after its run (nothing half-open).
    assert {i.lifecycle for i in store.list_for_run(run_id)} == {"ERROR"}


def test_an_unknown_run_is_not_found(engine):  # noqa: F811
    store = _store(engine)
    with pytest.raises(NotFound, match="run 0123abcd does not exist"):
        store.begin("0123abcd", "c1", "query_logs", 0, {})
    with pytest.raises(NotFound):
        store.require_open("0123abcd")


def test_the_invocation_budget_refuses_the_call_that_would_exceed_it(engine, run_id):  # noqa: F811
    store = _store(engine, RunBudget(max_invocations=3, max_evidence_bytes=10_000))
    with pytest.raises(ResourceExhausted, match="4 more tool calls would take run .* past its budget of 3"):
        store.require_open(run_id, planned_calls=4)
    for n, round_ in enumerate((0, 0, 1)):  # rounds share the budget
        store.begin(run_id, f"c{n}", "query_logs", round_, {})
    with pytest.raises(ResourceExhausted, match="used its budget of 3 tool invocations"):
        store.begin(run_id, "c4", "query_logs", 1, {})
    with pytest.raises(ResourceExhausted):
        store.require_open(run_id, planned_calls=0)
    assert store.require_open(run_id).invocations == 3  # open; only the budget is used up
    assert len(store.list_for_run(run_id)) == 3


def test_the_evidence_budget_refuses_a_result_that_would_exceed_it(engine, run_id):  # noqa: F811
    store = _store(engine, RunBudget(max_invocations=10, max_evidence_bytes=100))
    first = store.complete(store.begin(run_id, "c1", "query_logs", 0, {}), evidence_status="EVIDENCE_FOUND",
                           agent_result="错" * 20, ref_count=1)  # 60 bytes of UTF-8
    assert first.lifecycle == "READY"
    too_big = store.begin(run_id, "c2", "query_logs", 0, {})
    with pytest.raises(ResourceExhausted, match="a result of 41 bytes would take run .* past its budget of 100 "
                                                r"bytes of evidence \(60 used\); it was not stored"):
        store.complete(too_big, evidence_status="EVIDENCE_FOUND", agent_result="x" * 41, ref_count=1)
    (refused,) = store.get_many([too_big])
    assert refused.lifecycle == "ERROR" and refused.agent_result is None
    assert "it was not stored" in refused.error
    assert store.usage(run_id).evidence_bytes == 101  # what it fetched counts: the budget is used up
    with pytest.raises(ResourceExhausted, match="used its budget of 100 bytes of evidence"):
        store.begin(run_id, "c3", "query_logs", 0, {})
    with pytest.raises(ResourceExhausted):
        store.require_open(run_id, planned_calls=1)


def test_a_result_that_fits_the_evidence_budget_exactly_is_stored(engine, run_id):  # noqa: F811
    store = _store(engine, RunBudget(max_invocations=10, max_evidence_bytes=100))
    fits = store.complete(store.begin(run_id, "c1", "query_logs", 0, {}), evidence_status="EVIDENCE_FOUND",
                          agent_result="y" * 100, ref_count=1)
    assert fits.lifecycle == "READY" and store.usage(run_id).evidence_bytes == 100
    with pytest.raises(ResourceExhausted, match="used its budget of 100 bytes of evidence"):
        store.begin(run_id, "c2", "query_logs", 0, {})


def test_concurrent_writers_of_one_run_never_exceed_its_budget(engine, run_id):  # noqa: F811
    store = _store(engine, RunBudget(max_invocations=5, max_evidence_bytes=10_000))

    def begin(n: int) -> str:
        try:
            store.begin(run_id, f"c{n}", "query_logs", 0, {})
            return "begun"
        except ResourceExhausted:
            return "refused"

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(begin, range(16)))
    assert outcomes.count("begun") == 5 and outcomes.count("refused") == 11
    assert len(store.list_for_run(run_id)) == 5


def test_a_write_racing_the_run_being_finished_waits_and_is_refused(postgresql_engine):  # noqa: F811
    """PostgreSQL: while the gateway's finishing transaction holds the run's row, a begin waits for
    it and, once the run is finished, writes nothing (no invocation slips into a finished run)."""
    runs = RunStore(make_session_factory(postgresql_engine))
    run_id = runs.create_run(runs.create_session("test"), "payment-service 怎么了？", "MULTI_AGENT")
    store = _store(postgresql_engine, RunBudget(max_invocations=10, max_evidence_bytes=10_000))
    outcome: list[object] = []
    with postgresql_engine.connect() as finishing:
        finishing.execute(update(RunRow).where(RunRow.run_id == run_id).values(status="COMPLETED"))

        def write() -> None:
            try:
                outcome.append(store.begin(run_id, "c1", "query_logs", 0, {}))
            except FailedPrecondition as exc:
                outcome.append(exc)

        writer = threading.Thread(target=write)
        writer.start()
        time.sleep(0.5)
        assert outcome == [], "the write must wait for the finishing transaction"
        finishing.commit()
        writer.join(timeout=10)
    assert len(outcome) == 1 and isinstance(outcome[0], FailedPrecondition), outcome
    assert store.list_for_run(run_id) == []
