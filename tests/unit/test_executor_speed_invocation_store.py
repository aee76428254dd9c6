"""Property: the invocation store writing each row with one Core statement on a connection (issue
19) stores the rows, returns the invocations and raises the errors of the ORM code it replaced,
on SQLite and on PostgreSQL. The replaced implementation is kept below as the oracle (copied):
`begin` added an ORM row and committed the session; `complete`/`fail` ran their UPDATE ...
RETURNING in a session; `list_for_run` loaded ORM rows. Both stores run the same generated calls
on two runs of one database; every column but the ids and the timestamps (whose presence is
compared) must match, and so must each call's outcome."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select, update

from shared.core.contracts import EvidenceRef, RetrievalDetails, ToolInvocation
from shared.db.engine import make_session_factory
from shared.db.invocation_store import InvocationStore, invocation_from_row
from shared.db.models import ToolInvocationRow, utcnow
from shared.db.run_store import RunStore
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
