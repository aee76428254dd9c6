"""Property: the invocation store writing each row with one Core statement on a connection (issue
19) stores the rows, returns the invocations and raises the errors of the ORM code it replaced,
on SQLite and on PostgreSQL. The replaced implementation is kept below as the oracle (copied):
`begin` added an ORM row and committed the session; `complete`/`fail` ran their UPDATE ...
RETURNING in a session; `list_for_run` loaded ORM rows. Both stores run the same generated calls
on two runs of one database; every column but the ids and the timestamps (whose presence is
compared) must match, and so must each call's outcome.

Starting an attempt was one INSERT ... ON CONFLICT DO UPDATE, which SQLAlchemy compiles afresh on
every call; it is now an INSERT of the first attempt, then an UPDATE of a later one. The upsert is
kept below too (`OracleAttemptStore`), and both run the same generated attempts, writes and
finished runs: the outcomes, the attempts recorded and the invocations' abandoned flags match."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Integer, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite

from shared.core.contracts import EvidenceRef, RetrievalDetails, ToolInvocation
from shared.db.engine import make_session_factory
from shared.db.invocation_store import _LOCK_RUN_FOR_ATTEMPT, OPEN_RUN_STATUS, InvocationStore, invocation_from_row
from shared.db.models import ExecutorAttemptRow, RunRow, ToolInvocationRow, utcnow
from shared.db.run_store import RunStore
from shared.errors import FailedPrecondition, NotFound
from tests.unit.test_db_stores import engine, postgresql_engine, sqlite_engine  # noqa: F401 - fixtures

# --- oracle: the replaced code ---------------------------------------------------------------------


class OracleStore(InvocationStore):
    """`complete` and `fail` (unchanged) are inherited; what they call is the replaced code."""

    def begin(self, run_id: str, tool_call_id: str, tool_name: str, round: int,
              request: dict[str, Any]) -> int:
        with self._sessions() as session:
            row = ToolInvocationRow(run_id=run_id, tool_call_id=tool_call_id, tool_name=tool_name, round=round,
                                    lifecycle="PROJECTING", request=request, error="")
            session.add(row)
            session.commit()
            return row.invocation_id

    def _finish(self, invocation_id: int, details: RetrievalDetails | None, **values: Any) -> ToolInvocation:
        table = ToolInvocationRow.__table__
        kept = (table.c.run_id, table.c.tool_call_id, table.c.tool_name, table.c.round, table.c.request,
                table.c.agent_result, table.c.error)
        with self._sessions() as session:
            row = session.execute(
                update(table)
                .where(table.c.invocation_id == invocation_id, table.c.lifecycle == "PROJECTING")
                .values(completed_at=utcnow(), **values)
                .returning(*kept)
            ).one_or_none()
            session.commit()
            if row is None:
                existing = session.get(ToolInvocationRow, invocation_id)
                if existing is None:
                    raise LookupError(f"tool invocation {invocation_id} does not exist")
                raise ValueError(f"tool invocation {invocation_id} is already {existing.lifecycle}; "
                                 "a finished invocation is never rewritten")
        return ToolInvocation(
            invocation_id=invocation_id, run_id=row.run_id, tool_call_id=row.tool_call_id, tool_name=row.tool_name,
            round=row.round, lifecycle=values["lifecycle"], evidence_status=values["evidence_status"],
            request=row.request or {}, agent_result=row.agent_result, retrieval_details=details, error=row.error,
        )

    def list_for_run(self, run_id: str, tool_name: str | None = None) -> list[ToolInvocation]:
        query = select(ToolInvocationRow).where(ToolInvocationRow.run_id == run_id)
        if tool_name is not None:
            query = query.where(ToolInvocationRow.tool_name == tool_name)
        with self._sessions() as session:
            rows = session.scalars(query.order_by(ToolInvocationRow.invocation_id))
            return [invocation_from_row(row) for row in rows]


class OracleAttemptStore(InvocationStore):
    """`start_attempt` as the one upsert it was (the rest is the store's own)."""

    def start_attempt(self, run_id: str, round_: int, attempt: int) -> int:
        runs, attempts = RunRow.__table__, ExecutorAttemptRow.__table__
        with self._connection() as connection:
            dialect = connection.dialect.name
            if dialect == "postgresql":
                connection.execute(_LOCK_RUN_FOR_ATTEMPT, {"run_id": run_id}).all()
            row = select(runs.c.run_id, bindparam("attempt_round", type_=Integer()),
                         bindparam("attempt_number", type_=Integer()), bindparam("started_at")).where(
                runs.c.run_id == bindparam("run_id"), runs.c.status == OPEN_RUN_STATUS)
            statement = postgresql.insert(attempts) if dialect == "postgresql" else sqlite.insert(attempts)
            statement = statement.from_select(["run_id", "round", "attempt", "started_at"], row)
            upsert = statement.on_conflict_do_update(
                index_elements=[attempts.c.run_id, attempts.c.round],
                set_={"attempt": statement.excluded.attempt, "started_at": statement.excluded.started_at},
                where=attempts.c.attempt < statement.excluded.attempt,
            ).returning(attempts.c.attempt)
            started = connection.execute(upsert, {"run_id": run_id, "attempt_round": round_,
                                                  "attempt_number": attempt, "started_at": utcnow()}).scalar_one_or_none()
            if started is None:
                self._refuse_attempt(connection, run_id, round_, attempt)
            marked = connection.execute(self._for(connection).abandon, {
                "abandon_run": run_id, "abandon_round": round_, "abandon_below": attempt,
            }).rowcount
        return int(marked)


# --- inputs --------------------------------------------------------------------------------------

TOOLS = st.sampled_from(["query_metrics", "query_logs", "query_changes", "lookup_knowledge", "get_current_time"])
# Text both databases store: PostgreSQL refuses NUL in text and JSON.
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
SCALARS = st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.floats(-1e9, 1e9) | TEXT
REQUESTS = st.dictionaries(TEXT, SCALARS | st.lists(SCALARS, max_size=3), max_size=5)
REFS = st.lists(st.builds(EvidenceRef, raw_path=TEXT, text=TEXT, source=TEXT, timestamp=TEXT), max_size=3)


@st.composite
def calls(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """begin / complete / fail calls; a finish names a begun call by position (or none that exists)."""
    made: list[tuple[Any, ...]] = []
    begun = 0
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["begin", "begin", "complete", "complete_listed", "fail"]))
        if kind == "begin" or begun == 0:
            made.append(("begin", draw(TEXT), draw(TOOLS), draw(st.integers(0, 3)), draw(REQUESTS)))
            begun += 1
            continue
        target = draw(st.integers(0, begun))  # == begun: an id that does not exist
        if kind == "fail":
            made.append(("fail", target, draw(TEXT)))
        elif kind == "complete":
            made.append(("complete", target, draw(st.sampled_from(["EVIDENCE_FOUND", "NO_EVIDENCE"])), draw(TEXT),
                         draw(TEXT), draw(st.integers(0, 10**6)), draw(st.booleans())))
        else:
            made.append(("complete_listed", target, draw(st.sampled_from(["EVIDENCE_FOUND", "NO_EVIDENCE"])),
                         draw(TEXT), draw(REFS), draw(st.booleans())))
    return made


def _play(store: Any, run_id: str, made: list[tuple[Any, ...]]) -> list[Any]:
    """Each call's outcome, ids replaced by their position among the run's begun calls."""
    ids: list[int] = []
    outcomes: list[Any] = []
    for call in made:
        try:
            if call[0] == "begin":
                ids.append(store.begin(run_id, *call[1:]))
                outcomes.append(("begun", len(ids) - 1))
                continue
            target = ids[call[1]] if call[1] < len(ids) else max(ids) + 10_000
            if call[0] == "fail":
                done = store.fail(target, call[2])
            elif call[0] == "complete":
                done = store.complete(target, evidence_status=call[2], agent_result=call[3], source=call[4],
                                      ref_count=call[5], deduped=call[6])
            else:
                done = store.complete(target, evidence_status=call[2], agent_result=call[3], evidence_refs=call[4],
                                      deduped=call[5])
            outcomes.append(_positional(done, ids, run_id))
        except (LookupError, ValueError) as exc:
            outcomes.append((type(exc).__name__, str(exc).replace(str(target), "#")))
    return outcomes


def _positional(invocation: ToolInvocation, ids: list[int], run_id: str) -> dict[str, Any]:
    record = invocation.model_dump()
    assert record.pop("run_id") == run_id
    record["invocation_id"] = ids.index(record["invocation_id"])
    return record


def _rows(engine_: Any, run_id: str) -> list[dict[str, Any]]:
    table = ToolInvocationRow.__table__
    with engine_.connect() as connection:
        rows = connection.execute(select(table).where(table.c.run_id == run_id).order_by(table.c.invocation_id)).all()
    stored = []
    for row in rows:
        record = dict(row._mapping)
        del record["invocation_id"], record["run_id"]
        record["created_at"] = record["created_at"] is not None
        record["completed_at"] = record["completed_at"] is not None
        stored.append(record)
    return stored


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"], indirect=True)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(made=calls())
def test_the_core_store_writes_and_reads_what_the_orm_store_did(engine: Any, made: list[tuple[Any, ...]]) -> None:  # noqa: F811 - the fixture
    sessions = make_session_factory(engine)
    runs = RunStore(sessions)
    session_id = runs.create_session("oracle")
    ours, theirs = runs.create_run(session_id, "q", "MULTI_AGENT"), runs.create_run(session_id, "q", "MULTI_AGENT")
    store, oracle = InvocationStore(sessions), OracleStore(sessions)
    assert _play(store, ours, made) == _play(oracle, theirs, made)
    assert _rows(engine, ours) == _rows(engine, theirs)
    for tool_name in (None, "query_logs"):
        listed = [_positional(i, [j.invocation_id for j in store.list_for_run(ours)], ours)
                  for i in store.list_for_run(ours, tool_name)]
        expected = [_positional(i, [j.invocation_id for j in oracle.list_for_run(theirs)], theirs)
                    for i in oracle.list_for_run(theirs, tool_name)]
        assert listed == expected


@st.composite
def attempt_calls(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Attempts started, invocations begun by some attempt, the run finished, an unknown run."""
    made: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["start", "start", "start", "begin", "begin", "finish", "start_unknown"]))
        round_, attempt = draw(st.integers(0, 2)), draw(st.integers(0, 3))
        made.append((kind, round_, attempt))
    return made


def _play_attempts(store: InvocationStore, engine_: Any, run_id: str, made: list[tuple[Any, ...]]) -> list[Any]:
    outcomes: list[Any] = []
    for kind, round_, attempt in made:
        try:
            if kind == "finish":
                with engine_.begin() as connection:
                    connection.execute(update(RunRow.__table__).where(RunRow.__table__.c.run_id == run_id)
                                       .values(status="SUCCEEDED"))
                outcomes.append("finished")
            elif kind == "begin":
                store.begin(run_id, f"c{len(outcomes)}", "query_logs", round_, {}, attempt=attempt)
                outcomes.append("begun")
            else:
                target = run_id if kind == "start" else "no-such-run"
                outcomes.append(("started", store.start_attempt(target, round_, attempt)))
        except (NotFound, FailedPrecondition) as exc:
            outcomes.append((type(exc).__name__, str(exc).replace(run_id, "#"), exc.reason))
    return outcomes


def _attempt_rows(engine_: Any, run_id: str) -> tuple[list[Any], list[Any]]:
    attempts, invocations = ExecutorAttemptRow.__table__, ToolInvocationRow.__table__
    with engine_.connect() as connection:
        started = connection.execute(select(attempts.c.round, attempts.c.attempt, attempts.c.started_at.is_not(None))
                                     .where(attempts.c.run_id == run_id).order_by(attempts.c.round)).all()
        flags = connection.execute(select(invocations.c.round, invocations.c.attempt, invocations.c.abandoned)
                                   .where(invocations.c.run_id == run_id).order_by(invocations.c.invocation_id)).all()
    return [tuple(row) for row in started], [tuple(row) for row in flags]


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"], indirect=True)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(made=attempt_calls())
def test_attempts_start_as_the_upsert_started_them(engine: Any, made: list[tuple[Any, ...]]) -> None:  # noqa: F811 - the fixture
    sessions = make_session_factory(engine)
    runs = RunStore(sessions)
    session_id = runs.create_session("oracle")
    ours, theirs = runs.create_run(session_id, "q", "MULTI_AGENT"), runs.create_run(session_id, "q", "MULTI_AGENT")
    assert (_play_attempts(InvocationStore(sessions), engine, ours, made)
            == _play_attempts(OracleAttemptStore(sessions), engine, theirs, made))
    assert _attempt_rows(engine, ours) == _attempt_rows(engine, theirs)
