"""Persistence on a real SQLite file and a real PostgreSQL (a throwaway cluster, or the server
ATTEST_TEST_POSTGRES_URL names), schema created by the Alembic migrations."""

from __future__ import annotations

import secrets
import threading
from datetime import UTC, datetime, timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

from shared.core.contracts import EvidenceRef, TimeWindow
from shared.core.follow_up import InheritedContext
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.migrate import upgrade
from shared.db.models import Base
from shared.db.run_store import ConcurrentWriteError, RequestIdTaken, RunStore, stored_time
from shared.errors import NotFound


@pytest.fixture()
def sqlite_engine(tmp_path):
    # A nested directory that does not exist yet: make_engine must create it.
    url = f"sqlite:///{tmp_path / 'nested' / 'attest.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()


@pytest.fixture()
def postgresql_engine(postgres_admin_url):
    """A fresh database on the test server, dropped afterwards."""
    name = f"attest_test_{secrets.token_hex(4)}"
    admin = make_engine(postgres_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(postgres_admin_url).set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    engine = make_engine(url, pool_size=10, max_overflow=50)
    yield engine
    engine.dispose()
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request):
    return request.getfixturevalue(f"{request.param}_engine")


@pytest.fixture()
def runs(engine) -> RunStore:
    return RunStore(make_session_factory(engine))


@pytest.fixture()
def invocations(engine) -> InvocationStore:
    return InvocationStore(make_session_factory(engine))


@pytest.fixture()
def run_id(runs) -> str:
    return runs.create_run(runs.create_session("test"), "为什么 payment-service 的 CPU 这么高?", "MULTI_AGENT")


def test_migration_creates_the_four_tables_matching_the_models(engine):
    tables = set(inspect(engine).get_table_names())
    assert {"diagnosis_session", "diagnosis_run", "tool_invocation", "orchestration_event"} <= tables
    with engine.connect() as connection:
        drift = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert drift == []


def test_sqlite_pragmas_are_applied(sqlite_engine):
    with sqlite_engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000


def test_invocation_begin_complete_list(invocations, run_id, engine):
    request = {"query": "cpu", "service": "payment-service"}
    first = invocations.begin(run_id, "call-1", "query_metrics", 0, request)
    second = invocations.begin(run_id, "call-2", "query_logs", 0, {"query": "error"})
    assert second > first

    # Persisted (committed) before the tool result exists: visible from another connection.
    other = InvocationStore(make_session_factory(make_engine(str(engine.url))))
    (pending,) = other.get_many([first])
    assert pending.lifecycle == "PROJECTING"
    assert pending.evidence_status is None
    assert pending.request == request

    refs = [EvidenceRef(raw_path="series[0].points[12]", text="cpu 92%", source="prometheus")]
    done = invocations.complete(
        first, evidence_status="EVIDENCE_FOUND", agent_result="cpu peaked at 92%", evidence_refs=refs
    )
    assert done.lifecycle == "READY"
    assert done.evidence_status == "EVIDENCE_FOUND"
    assert done.agent_result == "cpu peaked at 92%"
    assert done.retrieval_details is not None
    assert done.retrieval_details.evidence_refs == refs
    assert done.retrieval_details.deduped is False

    listed = invocations.list_for_run(run_id)
    assert [i.invocation_id for i in listed] == [first, second]
    assert listed[0] == done
    assert [i.lifecycle for i in listed] == ["READY", "PROJECTING"]


def test_an_unknown_evidence_status_is_refused_before_anything_is_written(invocations, run_id):
    invocation_id = invocations.begin(run_id, "c", "query_logs", 0, {"query": "error"})
    with pytest.raises(ValueError, match="unknown evidence status 'READY'"):
        invocations.complete(invocation_id, evidence_status="READY", agent_result="{}")  # type: ignore[arg-type]
    (row,) = invocations.get_many([invocation_id])
    assert (row.lifecycle, row.evidence_status, row.agent_result) == ("PROJECTING", None, None)


def test_deduped_flag_is_kept(invocations, run_id):
    invocation_id = invocations.begin(run_id, "c", "lookup_knowledge", 1, {"query": "cpu"})
    done = invocations.complete(
        invocation_id, evidence_status="NO_EVIDENCE", agent_result="", evidence_refs=[], deduped=True
    )
    assert done.retrieval_details.deduped is True
    assert done.round == 1


def test_accounts_read_the_outcome_without_the_evidence(invocations, run_id):
    refs = [EvidenceRef(raw_path=f"hits[{i}]", text=f"line {i}", source="loki") for i in range(3)]
    hit = invocations.begin(run_id, "c1", "query_logs", 0, {})
    invocations.complete(hit, evidence_status="EVIDENCE_FOUND", agent_result="{}", evidence_refs=refs)
    repeat = invocations.begin(run_id, "c2", "lookup_knowledge", 1, {})
    invocations.complete(repeat, evidence_status="EVIDENCE_FOUND", agent_result="{}", evidence_refs=refs[:1],
                         deduped=True)
    invocations.fail(invocations.begin(run_id, "c3", "query_metrics", 1, {}), "prometheus down")
    invocations.begin(run_id, "c4", "query_changes", 1, {})  # still running

    accounts = invocations.accounts_for_run(run_id)
    assert [(a.tool_name, a.round, a.lifecycle, a.evidence_status, a.deduped, a.evidence_refs) for a in accounts] == [
        ("query_logs", 0, "READY", "EVIDENCE_FOUND", False, 3),
        ("lookup_knowledge", 1, "READY", "EVIDENCE_FOUND", True, 1),
        ("query_metrics", 1, "ERROR", "ERROR", False, 0),
        ("query_changes", 1, "PROJECTING", None, False, 0),
    ]
    assert invocations.accounts_for_run("no-such-run") == []


def test_invocation_fail_path(invocations, run_id):
    invocation_id = invocations.begin(run_id, "call-1", "query_logs", 0, {"query": "oom"})
    failed = invocations.fail(invocation_id, "loki timed out")
    assert failed.lifecycle == "ERROR"
    assert failed.evidence_status == "ERROR"
    assert failed.error == "loki timed out"
    assert failed.retrieval_details is None


def test_finished_invocation_is_never_rewritten(invocations, run_id):
    invocation_id = invocations.begin(run_id, "call-1", "query_logs", 0, {})
    invocations.complete(invocation_id, evidence_status="NO_EVIDENCE", agent_result="", evidence_refs=[])
    with pytest.raises(ValueError):
        invocations.fail(invocation_id, "late failure")
    (kept,) = invocations.get_many([invocation_id])
    assert kept.lifecycle == "READY"
    with pytest.raises(LookupError):
        invocations.fail(invocation_id + 1000, "no such invocation")


def test_get_many_returns_only_existing_ids_in_order(invocations, runs, run_id):
    other_run = runs.create_run(runs.run_session_id(run_id), "q2", "MULTI_AGENT")
    a = invocations.begin(run_id, "a", "query_metrics", 0, {})
    b = invocations.begin(other_run, "b", "query_logs", 0, {})
    found = invocations.get_many([b, 999_999, a])
    assert [(i.invocation_id, i.run_id) for i in found] == [(a, run_id), (b, other_run)]
    assert invocations.get_many([]) == []


def test_invocation_requires_an_existing_run(invocations):
    with pytest.raises(NotFound, match="run no-such-run does not exist"):  # refused before the foreign key
        invocations.begin("no-such-run", "c", "query_logs", 0, {})
    assert invocations.list_for_run("no-such-run") == []


def test_a_run_without_a_session_starts_one_in_the_same_write(runs):
    session_id, run_id = runs.start_run(None, "q", "MULTI_AGENT", trace_id="cd" * 16, client_label="chat-ui")
    assert runs.session_exists(session_id) and runs.run_session_id(run_id) == session_id
    again, second = runs.start_run(session_id, "q2", "SINGLE_REACT")
    assert again == session_id and second != run_id and runs.get_run(second)["mode"] == "SINGLE_REACT"
    with pytest.raises(IntegrityError):  # a named session must exist: nothing is written for it
        runs.start_run("no-such-session", "q", "MULTI_AGENT")


def test_run_lifecycle_and_audit_view(runs, invocations):
    session_id = runs.create_session("test")
    run_id = runs.create_run(session_id, "q", "MULTI_AGENT", trace_id="ab" * 16)
    assert len(run_id) == 32 and run_id != runs.create_run(session_id, "q", "MULTI_AGENT")
    assert runs.record_event(run_id, "planner", "ENTER") == 1
    assert runs.record_event(run_id, "planner", "EXIT", status="OK", payload={"steps": 3}) == 2
    invocation_id = invocations.begin(run_id, "c", "query_metrics", 0, {"service": "payment-service"})
    runs.write_channel(run_id, "rule_evaluation", {"status": "pass"})
    runs.finish_run(run_id, status="COMPLETED", effective_verdict="PASS", answer="结论")

    run = runs.get_run(run_id)
    assert run["status"] == "COMPLETED"
    assert run["effective_verdict"] == "PASS"
    assert run["fallback_type"] is None
    assert run["answer"] == "结论"
    assert run["trace_id"] == "ab" * 16
    assert run["finished_at"] is not None
    assert run["self_evaluation"] == {"rule_evaluation": {"status": "pass"}}
    assert [(e["seq"], e["node"], e["phase"]) for e in run["events"]] == [
        (1, "planner", "ENTER"),
        (2, "planner", "EXIT"),
    ]
    assert run["events"][1]["payload"] == {"steps": 3}
    assert [i["invocation_id"] for i in run["invocations"]] == [invocation_id]
    assert run["invocations"][0]["request"] == {"service": "payment-service"}
    assert runs.get_run("missing") is None


def test_fallback_run_keeps_verdict_empty(runs, run_id):
    runs.finish_run(run_id, status="FALLBACK", fallback_type="PRE_VERIFICATION")
    run = runs.get_run(run_id)
    assert (run["status"], run["effective_verdict"], run["fallback_type"]) == (
        "FALLBACK",
        None,
        "PRE_VERIFICATION",
    )
    with pytest.raises(ValueError):
        runs.finish_run(run_id, status="DONE")


def test_event_seq_is_per_run(runs, run_id):
    other = runs.create_run(runs.run_session_id(run_id), "q", "MULTI_AGENT")
    assert runs.record_event(run_id, "graph", "INFO") == 1
    assert runs.record_event(other, "graph", "INFO") == 1
    assert runs.record_event(run_id, "graph", "INFO") == 2
    with pytest.raises(ValueError):
        runs.record_event(run_id, "graph", "START")


def test_event_batches_append_in_order_in_one_transaction(runs, run_id):
    assert runs.record_event(run_id, "planner", "ENTER") == 1
    batch = [{"node": "planner", "phase": "EXIT", "status": "OK"},
             {"node": "executor", "phase": "ENTER", "payload": {"round": 0}}]
    assert runs.record_events(run_id, batch) == [2, 3]
    assert runs.record_events(run_id, []) == []
    # One bad phase and nothing of the batch is written.
    with pytest.raises(ValueError):
        runs.record_events(run_id, [{"node": "executor", "phase": "EXIT"}, {"node": "x", "phase": "START"}])
    # A writer that knows the next seq skips reading it; a wrong guess collides and is corrected.
    assert runs.record_events(run_id, [{"node": "executor", "phase": "EXIT"}], next_seq=4) == [4]
    assert runs.record_events(run_id, [{"node": "gatekeeper", "phase": "ENTER"}], next_seq=2) == [5]
    events = runs.get_run(run_id)["events"]
    assert [(e["seq"], e["node"], e["phase"], e["status"]) for e in events] == [
        (1, "planner", "ENTER", ""), (2, "planner", "EXIT", "OK"), (3, "executor", "ENTER", ""),
        (4, "executor", "EXIT", ""), (5, "gatekeeper", "ENTER", "")]
    assert events[2]["payload"] == {"round": 0}
    with pytest.raises(LookupError):
        runs.record_events("missing", batch)


def test_concurrent_event_appends_get_distinct_consecutive_seqs(runs, run_id):
    writers = 20
    start = threading.Barrier(writers)
    seqs: list[int] = []
    errors: list[BaseException] = []

    def append() -> None:
        try:
            start.wait()
            seqs.append(runs.record_event(run_id, "graph", "INFO"))
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=append) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert sorted(seqs) == list(range(1, writers + 1))
    assert [e["seq"] for e in runs.get_run(run_id)["events"]] == list(range(1, writers + 1))


def test_event_on_missing_run(runs):
    with pytest.raises(LookupError):
        runs.record_event("missing", "graph", "INFO")


def test_write_channel_preserves_other_channels(runs, run_id):
    runs.write_channel(run_id, "rule_evaluation", {"status": "warn"})
    runs.write_channel(run_id, "verifier_evaluation", {"verdict": "LOW_CONFID"})
    runs.write_channel(run_id, "rule_evaluation", {"status": "pass"})
    assert runs.get_run(run_id)["self_evaluation"] == {
        "rule_evaluation": {"status": "pass"},
        "verifier_evaluation": {"verdict": "LOW_CONFID"},
    }


def test_unknown_channel_is_rejected(runs, run_id):
    with pytest.raises(ValueError):
        runs.write_channel(run_id, "tool_trace_summary", {"entries": []})
    assert runs.get_run(run_id)["self_evaluation"] == {}


def test_write_channel_on_missing_run(runs):
    with pytest.raises(LookupError):
        runs.write_channel("missing", "rule_evaluation", {})


def test_finishing_a_run_writes_its_channels_and_events_with_the_outcome(runs, run_id):
    runs.write_channel(run_id, "rule_evaluation", {"status": "pass"})
    runs.record_event(run_id, "gateway", "INFO")
    runs.finish_run(run_id, status="COMPLETED", effective_verdict="PASS", answer="结论",
                    channels={"verifier_evaluation": {"verdict": "PASS"}, "answer": {"retryable": False}},
                    events=[{"seq": 2, "node": "composer", "phase": "EXIT", "status": "OK"}])
    run = runs.get_run(run_id)
    assert (run["status"], run["effective_verdict"], run["answer"]) == ("COMPLETED", "PASS", "结论")
    assert run["self_evaluation"] == {"rule_evaluation": {"status": "pass"}, "verifier_evaluation": {"verdict": "PASS"},
                                      "answer": {"retryable": False}}
    assert [(e["seq"], e["node"]) for e in run["events"]] == [(1, "gateway"), (2, "composer")]


def test_finishing_a_run_with_a_taken_seq_writes_nothing(runs, run_id):
    runs.record_event(run_id, "gateway", "INFO")
    with pytest.raises(ConcurrentWriteError):
        runs.finish_run(run_id, status="COMPLETED", channels={"verifier_evaluation": {"verdict": "PASS"}},
                        events=[{"seq": 1, "node": "composer", "phase": "EXIT"}])
    run = runs.get_run(run_id)
    assert run["status"] == "RUNNING" and run["self_evaluation"] == {} and len(run["events"]) == 1
    with pytest.raises(LookupError):
        runs.finish_run("missing", status="COMPLETED", channels={"answer": {}})
    with pytest.raises(ValueError):
        runs.finish_run(run_id, status="COMPLETED", channels={"tool_trace_summary": {}})


def test_finishing_a_run_after_a_stale_read_keeps_the_other_writer_s_channel(runs, run_id, engine):
    interleaved: list[str] = []

    def write_other_channel_first(_conn, _cursor, statement, *_args):
        if statement.startswith("UPDATE diagnosis_run") and not interleaved:
            interleaved.append(statement)
            other = threading.Thread(target=runs.write_channel, args=(run_id, "rule_evaluation", {"status": "warn"}))
            other.start()
            other.join()

    event.listen(engine, "before_cursor_execute", write_other_channel_first)
    runs.finish_run(run_id, status="FALLBACK", channels={"verifier_evaluation": {"verdict": "LOW_CONFID"}})
    event.remove(engine, "before_cursor_execute", write_other_channel_first)
    assert interleaved
    run = runs.get_run(run_id)
    assert run["status"] == "FALLBACK"
    assert run["self_evaluation"] == {"rule_evaluation": {"status": "warn"}, "verifier_evaluation": {"verdict": "LOW_CONFID"}}


def test_a_write_based_on_a_stale_read_is_retried_not_applied(runs, run_id, engine):
    """Deterministic interleaving: another channel is written between our read and our UPDATE."""
    interleaved: list[str] = []

    def write_other_channel_first(_conn, _cursor, statement, *_args):
        if statement.startswith("UPDATE diagnosis_run") and not interleaved:
            interleaved.append(statement)
            other = threading.Thread(
                target=runs.write_channel, args=(run_id, "verifier_evaluation", {"verdict": "PASS"})
            )
            other.start()
            other.join()

    event.listen(engine, "before_cursor_execute", write_other_channel_first)
    runs.write_channel(run_id, "rule_evaluation", {"status": "pass"})

    assert interleaved, "the interleaving hook never ran"
    run = runs.get_run(run_id)
    assert run["self_evaluation"] == {
        "rule_evaluation": {"status": "pass"},
        "verifier_evaluation": {"verdict": "PASS"},
    }
    assert run["version"] == 2


def test_concurrent_writers_of_two_channels_never_erase_each_other(runs, run_id):
    writers = 50
    start = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(index: int) -> None:
        channel = "rule_evaluation" if index % 2 == 0 else "verifier_evaluation"
        try:
            start.wait()
            # 50 writers on one row is a stress far beyond a real run's two or three writers, so
            # the retry bound is raised: this test is about never erasing, not about the bound.
            runs.write_channel(run_id, channel, {"writer": index}, max_retries=500)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    run = runs.get_run(run_id)
    evaluation = run["self_evaluation"]
    assert set(evaluation) == {"rule_evaluation", "verifier_evaluation"}
    assert evaluation["rule_evaluation"]["writer"] % 2 == 0
    assert evaluation["verifier_evaluation"]["writer"] % 2 == 1
    # Every write landed exactly once: the version counts them.
    assert run["version"] == writers


@pytest.mark.parametrize("document", [
    {"refs": [{"text": "payment-service cpu=93.2% at 2026-11-29T21:13:45Z", "n": 3}], "中文": "结论"},
    {"huge": 123456789012345678901234567890, "negative": -99999999999999999999, "u64": 18446744073709551615},
])
def test_stored_json_reads_back_as_written(runs, run_id, document):
    runs.write_channel(run_id, "rule_evaluation", document)
    stored = runs.get_run(run_id)["self_evaluation"]["rule_evaluation"]
    assert stored == document
    assert {type(v) for v in stored.values()} == {type(v) for v in document.values()}


# Non-finite numbers (NaN, Infinity): tests/unit/test_db_json_non_finite.py, on both databases.


# --- request ids, a session's runs, what a follow-up inherits --------------------------------------


def test_a_request_id_claims_one_live_run_per_principal(runs):
    _, first = runs.start_run(None, "q", "MULTI_AGENT", principal="alice", request_id="key-1")
    with pytest.raises(RequestIdTaken) as taken:
        runs.start_run(None, "q", "MULTI_AGENT", principal="alice", request_id="key-1")
    assert taken.value.run_id == first
    # Another principal's key is its own; runs without a key never collide (NULLs are distinct).
    runs.start_run(None, "q", "MULTI_AGENT", principal="bob", request_id="key-1")
    for _ in range(3):
        runs.start_run(None, "q", "MULTI_AGENT", principal="alice")
    assert runs.request_claim("alice", "key-1")["run_id"] == first
    assert runs.request_claim("carol", "key-1") is None


def test_a_cancelled_or_expired_claim_is_released_by_the_next_run_with_the_key(runs):
    _, cancelled = runs.start_run(None, "q", "MULTI_AGENT", principal="alice", request_id="key-2")
    runs.finish_run(cancelled, status="CANCELLED")
    _, second = runs.start_run(None, "q", "MULTI_AGENT", principal="alice", request_id="key-2")
    assert second != cancelled and runs.request_claim("alice", "key-2")["run_id"] == second
    assert runs.get_run(cancelled)["request_id"] == "key-2", "the released run keeps its key for the audit"
    runs.finish_run(second, status="COMPLETED", answer="a")
    with pytest.raises(RequestIdTaken):
        runs.start_run(None, "q", "MULTI_AGENT", principal="alice", request_id="key-2",
                       request_ids_since=datetime.now(UTC) - timedelta(hours=24))
    # Past the retention window the key starts a new run.
    _, third = runs.start_run(None, "q", "MULTI_AGENT", principal="alice", request_id="key-2",
                              request_ids_since=datetime.now(UTC) + timedelta(seconds=1))
    assert runs.request_claim("alice", "key-2")["run_id"] == third


def test_concurrent_runs_with_one_request_id_make_one_run(runs):
    writers = 8
    start = threading.Barrier(writers)
    started: list[str] = []
    refused: list[str] = []

    def claim() -> None:
        start.wait()
        try:
            started.append(runs.start_run(None, "q", "MULTI_AGENT", principal="alice", request_id="race")[1])
        except RequestIdTaken as taken:
            refused.append(taken.run_id)

    threads = [threading.Thread(target=claim) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(started) == 1 and refused == started * (writers - 1)


def test_list_runs_pages_a_session_newest_first(runs):
    session_id, first = runs.start_run(None, "q0", "MULTI_AGENT", principal="alice")
    ids = [first] + [runs.start_run(session_id, f"q{n}", "MULTI_AGENT", principal="alice")[1] for n in range(1, 5)]
    runs.start_run(None, "elsewhere", "MULTI_AGENT", principal="alice")
    listed: list[str] = []
    before = None
    while True:
        page = runs.list_runs(session_id, 2, before)
        listed += [run["run_id"] for run in page]
        if len(page) < 2:
            break
        before = (stored_time(page[-1]["created_at"]), page[-1]["run_id"])
    assert listed == ids[::-1]


def test_list_runs_of_a_principal_spans_its_sessions_and_never_another_principals(runs):
    session_id, first = runs.start_run(None, "q0", "MULTI_AGENT", principal="alice")
    ids = [first, runs.start_run(None, "q1", "MULTI_AGENT", principal="alice")[1]]
    runs.start_run(None, "bob's", "MULTI_AGENT", principal="bob")
    ids.append(runs.start_run(session_id, "q2", "MULTI_AGENT", principal="alice")[1])
    listed: list[str] = []
    before = None
    while True:
        page = runs.list_runs(None, 2, before, principal="alice")
        listed += [run["run_id"] for run in page]
        if len(page) < 2:
            break
        before = (stored_time(page[-1]["created_at"]), page[-1]["run_id"])
    assert listed == ids[::-1]
    assert [run["query"] for run in runs.list_runs(None, 10, principal="bob")] == ["bob's"]
    assert runs.list_runs(session_id, 10, principal="bob") == [], "both filters hold at once"
    with pytest.raises(ValueError):
        runs.list_runs(None, 10)


def test_the_last_planned_context_is_the_newest_round_0_plan_with_services(runs):
    window = {"start": "2026-11-30T02:00:00Z", "end": "2026-11-30T03:00:00Z"}
    session_id, older = runs.start_run(None, "zz-a 怎么了", "MULTI_AGENT")
    runs.record_event(older, "planner", "EXIT", "OK", payload={"round": 0, "services": ["zz-a"], "window": window})
    assert runs.last_planned_context(session_id) == InheritedContext(older, ("zz-a",), TimeWindow(**window))
    _, newer = runs.start_run(session_id, "那它的内存呢", "MULTI_AGENT")
    runs.record_events(newer, [
        {"node": "planner", "phase": "EXIT", "payload": {"round": 0, "services": ["zz-b"]}},
        {"node": "planner", "phase": "EXIT", "payload": {"round": 1, "services": ["zz-c"], "window": window}},
    ])
    assert runs.last_planned_context(session_id) == InheritedContext(newer, ("zz-b",), None)
    _, nothing = runs.start_run(session_id, "系统慢吗", "MULTI_AGENT")
    runs.record_event(nothing, "planner", "EXIT", "OK", payload={"round": 0, "services": []})
    assert runs.last_planned_context(session_id).run_id == newer, "a run that planned no service is skipped"
    assert runs.last_planned_context(runs.create_session()) is None
