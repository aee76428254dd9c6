"""Tool invocations: persisted before their result is used, then completed or failed (DESIGN §2).

The gatekeeper checks every evidence binding against these rows, so a completed invocation is
never rewritten: `complete` and `fail` only apply to a row still PROJECTING.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, Row, bindparam, func, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from shared.core.contracts import EvidenceRef, EvidenceStatus, RetrievalDetails, ToolInvocation
from shared.db.models import ToolInvocationRow, utcnow

# Each row is written once by a Core statement on a connection of the session factory's engine:
# an ORM unit of work (and a Session around a single statement) cost more than the write itself,
# four tool calls a diagnosis. The statements are built once, so their cache keys are too.
_TABLE = ToolInvocationRow.__table__
_BEGIN = insert(_TABLE).returning(_TABLE.c.invocation_id)
# What `_finish` does not write, read back from the finished row.
_KEPT = (_TABLE.c.run_id, _TABLE.c.tool_call_id, _TABLE.c.tool_name, _TABLE.c.round, _TABLE.c.request,
         _TABLE.c.agent_result, _TABLE.c.error)
_FINISH = (update(_TABLE)
           .where(_TABLE.c.invocation_id == bindparam("finished_id"), _TABLE.c.lifecycle == "PROJECTING")
           .returning(*_KEPT))
_LIFECYCLE = select(_TABLE.c.lifecycle).where(_TABLE.c.invocation_id == bindparam("finished_id"))
# The columns an invocation is built from (invocation_from_row), in order of invocation_id.
_INVOCATION_COLUMNS = (_TABLE.c.invocation_id, _TABLE.c.run_id, _TABLE.c.tool_call_id, _TABLE.c.tool_name,
                       _TABLE.c.round, _TABLE.c.lifecycle, _TABLE.c.evidence_status, _TABLE.c.request,
                       _TABLE.c.agent_result, _TABLE.c.retrieval_details, _TABLE.c.error)
_OF_RUN = (select(*_INVOCATION_COLUMNS).where(_TABLE.c.run_id == bindparam("run_id"))
           .order_by(_TABLE.c.invocation_id))
_OF_RUN_AND_TOOL = (select(*_INVOCATION_COLUMNS)
                    .where(_TABLE.c.run_id == bindparam("run_id"), _TABLE.c.tool_name == bindparam("tool_name"))
                    .order_by(_TABLE.c.invocation_id))


def invocation_from_row(row: ToolInvocationRow | Row[Any]) -> ToolInvocation:
    return ToolInvocation(
        invocation_id=row.invocation_id,
        run_id=row.run_id,
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        round=row.round,
        lifecycle=row.lifecycle,
        evidence_status=row.evidence_status,
        request=row.request or {},
        agent_result=row.agent_result,
        retrieval_details=(
            RetrievalDetails.model_validate(row.retrieval_details)
            if row.retrieval_details is not None
            else None
        ),
        error=row.error,
    )


@dataclass(frozen=True)
class InvocationAccount:
    """What an audit counts of one invocation, without its evidence: how it ended, whether it was
    a deduplicated knowledge hit, and how many evidence refs its view holds."""

    tool_name: str
    round: int
    lifecycle: str
    evidence_status: str | None
    deduped: bool
    evidence_refs: int


class InvocationStore:
    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self._sessions = session_factory
        bind = session_factory.kw.get("bind")
        self._engine = bind if isinstance(bind, Engine) else None

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        """A connection in a transaction, committed when the block ends without an error."""
        if self._engine is not None:
            with self._engine.begin() as connection:
                yield connection
        else:  # a factory bound otherwise: its session's connection
            with self._sessions() as session, session.begin():
                yield session.connection()

    def begin(
        self,
        run_id: str,
        tool_call_id: str,
        tool_name: str,
        round: int,  # noqa: A002 - the spec's field name
        request: dict[str, Any],
    ) -> int:
        """Record a call about to run (PROJECTING); committed before this returns its id."""
        with self._connection() as connection:
            invocation_id: int = connection.execute(_BEGIN, {
                "run_id": run_id, "tool_call_id": tool_call_id, "tool_name": tool_name, "round": round,
                "lifecycle": "PROJECTING", "request": request, "error": "",
            }).scalar_one()
        return invocation_id

    def complete(
        self,
        invocation_id: int,
        *,
        evidence_status: EvidenceStatus,
        agent_result: str,
        source: str = "",
        ref_count: int = 0,
        deduped: bool = False,
        evidence_refs: list[EvidenceRef] | None = None,
    ) -> ToolInvocation:
        """Store what the agent saw; the row becomes READY. Its evidence refs are a view of
        `agent_result`, rendered on demand (shared/core/evidence_view.py): only the backend's name
        and the refs' count are stored beside it. `evidence_refs` stores an explicit list instead,
        as rows were written before the view (tests of old rows use it; the executor never does)."""
        if evidence_refs is None:
            details = RetrievalDetails(source=source, refs_rendered=True, ref_count=ref_count, deduped=deduped)
            stored = details.model_dump(mode="json", include={"deduped", "source", "refs_rendered", "ref_count"})
        else:
            details = RetrievalDetails(evidence_refs=evidence_refs, deduped=deduped)
            stored = details.model_dump(mode="json", include={"evidence_refs", "deduped"})
        return self._finish(
            invocation_id,
            details,
            lifecycle="READY",
            evidence_status=evidence_status,
            agent_result=agent_result,
            retrieval_details=stored,
        )

    def fail(self, invocation_id: int, error: str) -> ToolInvocation:
        """The tool call failed: lifecycle and evidence status ERROR, no evidence."""
        return self._finish(
            invocation_id, None, lifecycle="ERROR", evidence_status="ERROR", error=error
        )

    def _finish(self, invocation_id: int, details: RetrievalDetails | None, **values: Any) -> ToolInvocation:
        """One UPDATE ... RETURNING: the finished invocation is built from the row's other columns
        and the values just written, without reading back (and re-parsing) its evidence."""
        with self._connection() as connection:
            row = connection.execute(_FINISH, {"finished_id": invocation_id, "completed_at": utcnow(), **values}
                                     ).one_or_none()
            if row is None:
                lifecycle = connection.execute(_LIFECYCLE, {"finished_id": invocation_id}).scalar_one_or_none()
                if lifecycle is None:
                    raise LookupError(f"tool invocation {invocation_id} does not exist")
                raise ValueError(
                    f"tool invocation {invocation_id} is already {lifecycle}; "
                    "a finished invocation is never rewritten"
                )
        return ToolInvocation(
            invocation_id=invocation_id,
            run_id=row.run_id,
            tool_call_id=row.tool_call_id,
            tool_name=row.tool_name,
            round=row.round,
            lifecycle=values["lifecycle"],
            evidence_status=values["evidence_status"],
            request=row.request or {},
            agent_result=row.agent_result,
            retrieval_details=details,
            error=row.error,
        )

    def list_for_run(self, run_id: str, tool_name: str | None = None) -> list[ToolInvocation]:
        """Every invocation of the run (only `tool_name`'s when given), in the order they were begun."""
        with self._connection() as connection:
            if tool_name is None:
                rows = connection.execute(_OF_RUN, {"run_id": run_id}).all()
            else:
                rows = connection.execute(_OF_RUN_AND_TOOL, {"run_id": run_id, "tool_name": tool_name}).all()
        return [invocation_from_row(row) for row in rows]

    def accounts_for_run(self, run_id: str) -> list[InvocationAccount]:
        """`InvocationAccount`s of the run's invocations, in the order they were begun. The
        database reads the flag and the count out of the stored evidence, so the evidence itself
        is neither sent nor parsed."""
        details = ToolInvocationRow.retrieval_details
        with self._sessions() as session:
            if session.get_bind().dialect.name == "postgresql":
                deduped = details["deduped"].as_boolean()
                # A view's count, or an explicit list's length (a row written before the view).
                refs = func.coalesce(details["ref_count"].as_integer(), func.jsonb_array_length(details["evidence_refs"]))
            else:  # SQLite's JSON1 functions
                deduped = func.json_extract(details, "$.deduped")
                refs = func.coalesce(func.json_extract(details, "$.ref_count"),
                                     func.json_array_length(details, "$.evidence_refs"))
            rows = session.execute(
                select(ToolInvocationRow.tool_name, ToolInvocationRow.round, ToolInvocationRow.lifecycle,
                       ToolInvocationRow.evidence_status, deduped, refs)
                .where(ToolInvocationRow.run_id == run_id)
                .order_by(ToolInvocationRow.invocation_id)
            ).all()
        return [InvocationAccount(tool_name=name, round=round_, lifecycle=lifecycle, evidence_status=status,
                                  deduped=bool(is_deduped), evidence_refs=int(count or 0))
                for name, round_, lifecycle, status, is_deduped, count in rows]

    def get_many(self, ids: Iterable[int]) -> list[ToolInvocation]:
        """The invocations with these ids that exist (any run), ordered by id."""
        wanted = sorted(set(ids))
        if not wanted:
            return []
        with self._sessions() as session:
            rows = session.scalars(
                select(ToolInvocationRow)
                .where(ToolInvocationRow.invocation_id.in_(wanted))
                .order_by(ToolInvocationRow.invocation_id)
            )
            return [invocation_from_row(row) for row in rows]

    def other_run_invocation_ids(self, run_id: str, ids: Iterable[int]) -> set[int]:
        """Which of these invocation ids exist in a run other than `run_id`. Only ids and run ids
        are read: a caller learns that a citation points into another run, never its content."""
        wanted = sorted({i for i in ids if isinstance(i, int) and not isinstance(i, bool) and 0 < i <= _MAX_ROW_ID})
        table = ToolInvocationRow.__table__
        found: set[int] = set()
        with self._sessions() as session:
            for chunk in _chunks(wanted):
                found.update(session.scalars(
                    select(table.c.invocation_id).where(table.c.invocation_id.in_(chunk), table.c.run_id != run_id)
                ))
        return found

    def other_run_tool_call_ids(self, run_id: str, tool_call_ids: Iterable[str]) -> set[str]:
        """Which of these tool call ids some invocation of a run other than `run_id` has. Only the
        ids are read, never the invocations' content."""
        wanted = sorted({t for t in tool_call_ids if isinstance(t, str) and t and len(t) <= _MAX_TOOL_CALL_ID_CHARS})
        table = ToolInvocationRow.__table__
        found: set[str] = set()
        with self._sessions() as session:
            for chunk in _chunks(wanted):
                found.update(session.scalars(
                    select(table.c.tool_call_id).distinct()
                    .where(table.c.tool_call_id.in_(chunk), table.c.run_id != run_id)
                ))
        return found


# The key is an INTEGER (32-bit on PostgreSQL, whose driver casts parameters to the column type,
# so a larger cited id would fail the query instead of matching nothing).
_MAX_ROW_ID = 2**31 - 1
_MAX_TOOL_CALL_ID_CHARS = 200  # the column's length
_IN_CHUNK = 500  # bound parameters per statement


def _chunks(values: list[Any]) -> Iterable[list[Any]]:
    for start in range(0, len(values), _IN_CHUNK):
        yield values[start:start + _IN_CHUNK]
