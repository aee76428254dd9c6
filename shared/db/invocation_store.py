"""Tool invocations: persisted before their result is used, then completed or failed (DESIGN §2).

The gatekeeper checks every evidence binding against these rows, so a completed invocation is
never rewritten: `complete` and `fail` only apply to a row still PROJECTING.

Only an open run is written to: an invocation is begun, completed or failed
only while its run is RUNNING, in the same statement that writes it, so a run the gateway has
finished is immutable whatever is still running for it (FAILED_PRECONDITION; an unknown run is
NOT_FOUND). With a `RunBudget` the same statements keep each run within its invocations and
evidence bytes (RESOURCE_EXHAUSTED). On PostgreSQL the run's row is locked first, so the gateway
finishing the run, and another writer of the same run, wait for the write (or it for them).

Attempts: when the executor replica running a round is lost, the gateway runs
the round again as attempt 1. `start_attempt` records the attempt of (run, round) started last and,
in the same transaction, marks the invocations of every earlier attempt of (run, round)
abandoned; an attempt not above the one started is refused (FAILED_PRECONDITION), and so is every
write of a superseded attempt (`begin`, `complete`, `fail`), so a replica that was only cut off
never writes again. An abandoned invocation keeps its row for the audit (GetRun flags it); every
reader here leaves it out (`list_for_run`, `accounts_for_run`, the run's budget), so it is never
cited, counted, shown as a source or charged to the retry.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, get_args

from sqlalchemy import (
    ColumnElement,
    Connection,
    DateTime,
    Engine,
    Integer,
    LargeBinary,
    Row,
    String,
    bindparam,
    cast,
    exists,
    false,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.dml import Insert, Update

from shared.core.contracts import EvidenceRef, EvidenceStatus, RetrievalDetails, ToolInvocation
from shared.db.models import ExecutorAttemptRow, RunRow, ToolInvocationRow, utcnow
from shared.errors import FailedPrecondition, NotFound, Reason, ResourceExhausted

EVIDENCE_STATUSES: tuple[str, ...] = get_args(EvidenceStatus)

# Each row is written once by a Core statement on a connection of the session factory's engine:
# an ORM unit of work (and a Session around a single statement) cost more than the write itself,
# four tool calls a diagnosis. The statements are built once, so their cache keys are too.
_TABLE = ToolInvocationRow.__table__
_RUNS = RunRow.__table__
_ATTEMPTS = ExecutorAttemptRow.__table__
# The one status in which a run is written to; every other status is final.
OPEN_RUN_STATUS = "RUNNING"
# retrieval_details of an invocation whose result the run's evidence budget could not hold: its size.
REFUSED_BYTES = "refused_bytes"
# What `_finish` does not write, read back from the finished row.
_KEPT = (_TABLE.c.run_id, _TABLE.c.tool_call_id, _TABLE.c.tool_name, _TABLE.c.round, _TABLE.c.request,
         _TABLE.c.agent_result, _TABLE.c.error)
_LIFECYCLE = select(_TABLE.c.lifecycle, _TABLE.c.run_id, _TABLE.c.abandoned).where(_TABLE.c.invocation_id == bindparam("finished_id"))
# PostgreSQL only: the run's row, locked against the gateway finishing it and against another
# writer of the run until this transaction ends (a key-share lock still lets events be added).
_LOCK_RUN = select(_RUNS.c.status).where(_RUNS.c.run_id == bindparam("run_id")).with_for_update(key_share=True)
_LOCK_RUN_OF_INVOCATION = (select(_RUNS.c.status).join(_TABLE, _TABLE.c.run_id == _RUNS.c.run_id)
                           .where(_TABLE.c.invocation_id == bindparam("finished_id"))
                           .with_for_update(key_share=True, of=_RUNS))
# PostgreSQL only: starting an attempt locks the run's row against every writer of the run (their
# key-share locks), so no invocation of the superseded attempt is begun or finished meanwhile.
_LOCK_RUN_FOR_ATTEMPT = select(_RUNS.c.status).where(_RUNS.c.run_id == bindparam("run_id")).with_for_update()
_STARTED_ATTEMPT = select(_ATTEMPTS.c.attempt).where(_ATTEMPTS.c.run_id == bindparam("run_id"),
                                                     _ATTEMPTS.c.round == bindparam("attempt_round"))
# Not abandoned: what every reader here and every write of an invocation is restricted to.
_CURRENT = _TABLE.c.abandoned == false()
# The columns an invocation is built from (invocation_from_row), in order of invocation_id.
_INVOCATION_COLUMNS = (_TABLE.c.invocation_id, _TABLE.c.run_id, _TABLE.c.tool_call_id, _TABLE.c.tool_name,
                       _TABLE.c.round, _TABLE.c.lifecycle, _TABLE.c.evidence_status, _TABLE.c.request,
                       _TABLE.c.agent_result, _TABLE.c.retrieval_details, _TABLE.c.error, _TABLE.c.attempt,
                       _TABLE.c.abandoned)
_OF_RUN = (select(*_INVOCATION_COLUMNS).where(_TABLE.c.run_id == bindparam("run_id"), _CURRENT)
           .order_by(_TABLE.c.invocation_id))
_OF_RUN_AND_TOOL = (select(*_INVOCATION_COLUMNS)
                    .where(_TABLE.c.run_id == bindparam("run_id"), _TABLE.c.tool_name == bindparam("tool_name"),
                           _CURRENT)
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
        attempt=row.attempt,
        abandoned=row.abandoned,
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


@dataclass(frozen=True)
class RunBudget:
    """What one run may hold, all rounds together: tool invocations, and bytes of evidence (the
    agent results stored). Abandoned invocations are not charged: the retry of a lost attempt may
    run the same plan again (the gateway retries once, so a run stores at most twice its budget)."""

    max_invocations: int
    max_evidence_bytes: int


@dataclass(frozen=True)
class RunUsage:
    """A run's status and what it holds so far."""

    status: str
    invocations: int
    evidence_bytes: int


def _byte_length(column: ColumnElement[Any], dialect: str) -> ColumnElement[int]:
    if dialect == "postgresql":
        return func.octet_length(column)
    return func.length(cast(column, LargeBinary))  # SQLite: the UTF-8 bytes of the text


def _refused_bytes(details: ColumnElement[Any], dialect: str) -> ColumnElement[int]:
    if dialect == "postgresql":
        return details[REFUSED_BYTES].as_integer()  # type: ignore[no-any-return]
    return func.json_extract(details, f"$.{REFUSED_BYTES}")


def _evidence_bytes(run_id: ColumnElement[Any], dialect: str) -> ColumnElement[int]:
    """The bytes of evidence the run `run_id` names has used (a scalar subquery): the results it
    stored and those it fetched but could not store."""
    spent = _TABLE.alias("spent")
    used = (func.coalesce(_byte_length(spent.c.agent_result, dialect), 0)
            + func.coalesce(_refused_bytes(spent.c.retrieval_details, dialect), 0))
    return (select(func.coalesce(func.sum(used), 0)).where(spent.c.run_id == run_id, spent.c.abandoned == false())
            .scalar_subquery())


def _invocation_count(run_id: ColumnElement[Any]) -> ColumnElement[int]:
    counted = _TABLE.alias("counted")
    return (select(func.count()).select_from(counted).where(counted.c.run_id == run_id, counted.c.abandoned == false())
            .scalar_subquery())


@dataclass(frozen=True)
class _Statements:
    """The writes of one store, for one dialect: each only touches an open run within the budget."""

    begin: Insert
    finish_with_evidence: Update
    finish: Update
    usage: Any
    first_attempt: Insert
    later_attempt: Update
    abandon: Update

    @classmethod
    def build(cls, budget: RunBudget | None, dialect: str) -> _Statements:
        open_run = [_RUNS.c.run_id == bindparam("run_id"), _RUNS.c.status == OPEN_RUN_STATUS]
        first_attempt, later_attempt = _start_attempt(dialect, open_run)
        # An invocation of an attempt that a later attempt of (run, round) superseded.
        superseded = exists().where(_ATTEMPTS.c.run_id == _RUNS.c.run_id, _ATTEMPTS.c.round == bindparam("round"),
                                    _ATTEMPTS.c.attempt > bindparam("attempt", type_=Integer()))
        open_run = [*open_run, ~superseded]
        if budget is not None:
            open_run += [_invocation_count(_RUNS.c.run_id) < budget.max_invocations,
                         _evidence_bytes(_RUNS.c.run_id, dialect) < budget.max_evidence_bytes]
        row = select(
            _RUNS.c.run_id, bindparam("tool_call_id", type_=String()), bindparam("tool_name", type_=String()),
            bindparam("round", type_=Integer()), literal("PROJECTING"), bindparam("request", type_=_TABLE.c.request.type),
            literal(""), bindparam("created_at", type_=DateTime(timezone=True)), bindparam("attempt", type_=Integer()),
        ).where(*open_run)
        begin = (insert(_TABLE)
                 .from_select(["run_id", "tool_call_id", "tool_name", "round", "lifecycle", "request", "error",
                               "created_at", "attempt"], row, include_defaults=False)
                 .returning(_TABLE.c.invocation_id))
        unfinished = [_TABLE.c.invocation_id == bindparam("finished_id"), _TABLE.c.lifecycle == "PROJECTING", _CURRENT,
                      exists().where(_RUNS.c.run_id == _TABLE.c.run_id, _RUNS.c.status == OPEN_RUN_STATUS)]
        within = list(unfinished)
        if budget is not None:
            within.append(_evidence_bytes(_TABLE.c.run_id, dialect) + bindparam("new_bytes", type_=Integer())
                          <= budget.max_evidence_bytes)
        usage = (select(_RUNS.c.status, _invocation_count(_RUNS.c.run_id), _evidence_bytes(_RUNS.c.run_id, dialect))
                 .where(_RUNS.c.run_id == bindparam("run_id")))
        abandon = (update(_TABLE)
                   .where(_TABLE.c.run_id == bindparam("abandon_run"), _TABLE.c.round == bindparam("abandon_round"),
                          _TABLE.c.attempt < bindparam("abandon_below"), _CURRENT)
                   .values(abandoned=True))
        return cls(begin=begin, finish_with_evidence=update(_TABLE).where(*within).returning(*_KEPT),
                   finish=update(_TABLE).where(*unfinished).returning(*_KEPT), usage=usage,
                   first_attempt=first_attempt, later_attempt=later_attempt, abandon=abandon)


def _start_attempt(dialect: str, open_run: list[ColumnElement[bool]]) -> tuple[Insert, Update]:
    """Record attempt :attempt_number of (:run_id, :attempt_round) as started, only for an open run:
    the first attempt of (run, round) is inserted, a later one replaces the attempt already
    started only when above it. Each returns the attempt, or no row when refused.

    Two plain statements rather than one upsert: SQLAlchemy does not cache the compiled form of an
    INSERT ... ON CONFLICT, which made compiling it most of the cost of starting an attempt. They
    are one transaction, which SQLite runs as its one writer and PostgreSQL after the run's row
    lock (`_LOCK_RUN_FOR_ATTEMPT`), so no other start of the run's attempt comes between them;
    those are the two databases the run-state checks here hold on."""
    if dialect not in ("postgresql", "sqlite"):
        raise ValueError(f"attempts are recorded on SQLite and PostgreSQL only, not {dialect}")
    started = exists().where(_ATTEMPTS.c.run_id == bindparam("run_id"), _ATTEMPTS.c.round == bindparam("attempt_round"))
    row = select(_RUNS.c.run_id, bindparam("attempt_round", type_=Integer()),
                 bindparam("attempt_number", type_=Integer()),
                 bindparam("started_at", type_=DateTime(timezone=True))).where(*open_run, ~started)
    first = (insert(_ATTEMPTS).from_select(["run_id", "round", "attempt", "started_at"], row)
             .returning(_ATTEMPTS.c.attempt))
    # An UPDATE's parameters are not named after the table's columns (SQLAlchemy would SET them).
    later = (update(_ATTEMPTS)
             .where(_ATTEMPTS.c.run_id == bindparam("later_run"), _ATTEMPTS.c.round == bindparam("later_round"),
                    _ATTEMPTS.c.attempt < bindparam("attempt_number", type_=Integer()),
                    exists().where(_RUNS.c.run_id == _ATTEMPTS.c.run_id, _RUNS.c.status == OPEN_RUN_STATUS))
             .values(attempt=bindparam("attempt_number", type_=Integer()),
                     started_at=bindparam("later_started_at", type_=DateTime(timezone=True)))
             .returning(_ATTEMPTS.c.attempt))
    return first, later


class InvocationStore:
    def __init__(self, session_factory: sessionmaker[Session], budget: RunBudget | None = None) -> None:
        """Without a `budget` a run may hold any number of invocations (readers need none)."""
        self._sessions = session_factory
        bind = session_factory.kw.get("bind")
        self._engine = bind if isinstance(bind, Engine) else None
        self._budget = budget
        self._statements: dict[str, _Statements] = {}

    def _for(self, connection: Connection) -> _Statements:
        dialect = connection.dialect.name
        if dialect not in self._statements:
            self._statements[dialect] = _Statements.build(self._budget, dialect)
        return self._statements[dialect]

    @staticmethod
    def _lock(connection: Connection, statement: Any, params: dict[str, Any]) -> None:
        """PostgreSQL: take the run's row lock before writing (SQLite runs one writer at a time)."""
        if connection.dialect.name == "postgresql":
            connection.execute(statement, params).all()

    def usage(self, run_id: str) -> RunUsage:
        """The run's status and what it holds; NotFound for a run that does not exist."""
        with self._connection() as connection:
            usage = self._usage(connection, run_id)
        if usage is None:
            raise NotFound(f"run {run_id} does not exist", reason=Reason.RUN_NOT_FOUND, field="run_id")
        return usage

    def require_open(self, run_id: str, planned_calls: int | None = None) -> RunUsage:
        """The usage of a run that may still be written to: NotFound, or FailedPrecondition for a
        finished run. With `planned_calls`, ResourceExhausted when the run's budget is used up or
        that many more tool invocations would exceed it."""
        usage = self.usage(run_id)
        _refuse_closed(run_id, usage)
        if self._budget is not None and planned_calls is not None:
            _refuse_spent(run_id, usage, self._budget)
            if usage.invocations + planned_calls > self._budget.max_invocations:
                raise ResourceExhausted(
                    f"{planned_calls} more tool calls would take run {run_id} past its budget of "
                    f"{self._budget.max_invocations} tool invocations ({usage.invocations} used); nothing was run",
                    reason=Reason.RUN_INVOCATION_BUDGET, metadata={"limit": self._budget.max_invocations},
                )
        return usage

    def _usage(self, connection: Connection, run_id: str) -> RunUsage | None:
        row = connection.execute(self._for(connection).usage, {"run_id": run_id}).one_or_none()
        if row is None:
            return None
        return RunUsage(status=row[0], invocations=int(row[1]), evidence_bytes=int(row[2]))

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
        attempt: int = 0,
    ) -> int:
        """Record a call about to run (PROJECTING) for `attempt` of (run, round); committed before
        this returns its id. Only into an open run within its budget, for an attempt no later
        attempt of (run, round) superseded: NotFound, FailedPrecondition (a finished run, a
        superseded attempt) or ResourceExhausted otherwise, with nothing written."""
        with self._connection() as connection:
            self._lock(connection, _LOCK_RUN, {"run_id": run_id})
            invocation_id: int | None = connection.execute(self._for(connection).begin, {
                "run_id": run_id, "tool_call_id": tool_call_id, "tool_name": tool_name, "round": round,
                "request": request, "created_at": utcnow(), "attempt": attempt,
            }).scalar_one_or_none()
            if invocation_id is None:
                self._refuse_begin(connection, run_id, round, attempt)
        assert invocation_id is not None  # _refuse_begin always raises
        return invocation_id

    def start_attempt(self, run_id: str, round_: int, attempt: int) -> int:
        """Start `attempt` of (run, round) and mark every invocation of an earlier attempt of
        (run, round) abandoned, in one transaction; returns how many were marked. NotFound,
        FailedPrecondition for a finished run or for an attempt not above the one already started
        (a stale replica, or a repeated request), with nothing written."""
        with self._connection() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(_LOCK_RUN_FOR_ATTEMPT, {"run_id": run_id}).all()
            statements = self._for(connection)
            now = utcnow()
            started = connection.execute(statements.first_attempt, {
                "run_id": run_id, "attempt_round": round_, "attempt_number": attempt, "started_at": now,
            }).scalar_one_or_none()
            if started is None:
                started = connection.execute(statements.later_attempt, {
                    "later_run": run_id, "later_round": round_, "attempt_number": attempt, "later_started_at": now,
                }).scalar_one_or_none()
            if started is None:
                self._refuse_attempt(connection, run_id, round_, attempt)
            marked = connection.execute(statements.abandon, {
                "abandon_run": run_id, "abandon_round": round_, "abandon_below": attempt,
            }).rowcount
        return int(marked)

    def _refuse_attempt(self, connection: Connection, run_id: str, round_: int, attempt: int) -> None:
        _, started = self._open_run_attempt(connection, run_id, round_)
        raise FailedPrecondition(
            f"attempt {attempt} of run {run_id} round {round_} is stale: attempt {started} was already started; "
            "an attempt runs once, and a superseded one never writes again", reason=Reason.ATTEMPT_SUPERSEDED,
            field="attempt",
        )

    def _open_run_attempt(self, connection: Connection, run_id: str, round_: int) -> tuple[RunUsage, int | None]:
        """The usage of an open run and the attempt of (run, round) started last; NotFound, or
        FailedPrecondition for a finished run."""
        usage = self._usage(connection, run_id)
        if usage is None:
            raise NotFound(f"run {run_id} does not exist", reason=Reason.RUN_NOT_FOUND, field="run_id")
        _refuse_closed(run_id, usage)
        started = connection.execute(_STARTED_ATTEMPT, {"run_id": run_id, "attempt_round": round_}).scalar()
        return usage, started

    def _refuse_begin(self, connection: Connection, run_id: str, round_: int, attempt: int) -> None:
        usage, started = self._open_run_attempt(connection, run_id, round_)
        if started is not None and started > attempt:
            raise FailedPrecondition(
                f"attempt {attempt} of run {run_id} round {round_} was superseded by attempt {started}: "
                "it writes nothing more; nothing was written", reason=Reason.ATTEMPT_SUPERSEDED, field="attempt",
            )
        if self._budget is not None:
            _refuse_spent(run_id, usage, self._budget)
        raise FailedPrecondition(f"run {run_id} could not be written to; nothing was written",
                                 reason=Reason.RUN_NOT_WRITABLE)

    def complete(
        self,
        invocation_id: int,
        *,
        evidence_status: EvidenceStatus | None,
        agent_result: str,
        source: str = "",
        ref_count: int = 0,
        deduped: bool = False,
        evidence_refs: list[EvidenceRef] | None = None,
    ) -> ToolInvocation:
        """Store what the agent saw; the row becomes READY. With a budget, a result that would take
        the run past its evidence bytes is not stored: the row becomes ERROR saying so (its size
        counts as used, so the budget is used up) and ResourceExhausted is raised. Its evidence refs are a view of
        `agent_result`, rendered on demand (shared/core/evidence_view.py): only the backend's name
        and the refs' count are stored beside it. `evidence_refs` stores an explicit list instead,
        as rows were written before the view (tests of old rows use it; the executor never does).
        An evidence status outside the contract's (None: a helper tool's, no evidence) is refused
        before anything is written."""
        if evidence_status is not None and evidence_status not in EVIDENCE_STATUSES:
            raise ValueError(f"unknown evidence status {evidence_status!r}; expected one of {EVIDENCE_STATUSES}")
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
        evidence = values.get("agent_result")
        new_bytes = len(evidence.encode("utf-8")) if isinstance(evidence, str) else 0
        refused: ResourceExhausted | None = None
        with self._connection() as connection:
            self._lock(connection, _LOCK_RUN_OF_INVOCATION, {"finished_id": invocation_id})
            statements = self._for(connection)
            statement = statements.finish_with_evidence if new_bytes and self._budget else statements.finish
            params = {"finished_id": invocation_id, "completed_at": utcnow(), **values}
            if statement is statements.finish_with_evidence:
                params["new_bytes"] = new_bytes
            row = connection.execute(statement, params).one_or_none()
            if row is None:
                refused = self._refuse_finish(connection, invocation_id, new_bytes)
                connection.execute(statements.finish, {
                    "finished_id": invocation_id, "completed_at": utcnow(), "lifecycle": "ERROR",
                    "evidence_status": "ERROR", "error": str(refused), "retrieval_details": {REFUSED_BYTES: new_bytes},
                })
        if refused is not None:
            raise refused
        assert row is not None
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

    def _refuse_finish(self, connection: Connection, invocation_id: int, new_bytes: int) -> ResourceExhausted:
        """Why the invocation cannot be finished: raised, or returned when its result is over the
        run's evidence budget (the caller records that refusal)."""
        found = connection.execute(_LIFECYCLE, {"finished_id": invocation_id}).one_or_none()
        if found is None:
            raise LookupError(f"tool invocation {invocation_id} does not exist")
        usage = self._usage(connection, found.run_id)
        assert usage is not None  # the invocation's foreign key names it
        # The run first: ending a run closes its invocations still PROJECTING, and a late write
        # to one of them is refused for the run, as it was before the close.
        _refuse_closed(found.run_id, usage)
        if found.lifecycle != "PROJECTING":
            raise ValueError(
                f"tool invocation {invocation_id} is already {found.lifecycle}; "
                "a finished invocation is never rewritten"
            )
        if found.abandoned:
            raise FailedPrecondition(
                f"tool invocation {invocation_id} belongs to an abandoned attempt of run {found.run_id}: "
                "a superseded attempt writes nothing more; nothing was written",
                reason=Reason.ATTEMPT_SUPERSEDED,
            )
        if self._budget is not None and new_bytes:
            return ResourceExhausted(
                f"a result of {new_bytes} bytes would take run {found.run_id} past its budget of "
                f"{self._budget.max_evidence_bytes} bytes of evidence ({usage.evidence_bytes} used); it was not stored",
                reason=Reason.RUN_EVIDENCE_BUDGET, metadata={"limit": self._budget.max_evidence_bytes},
            )
        raise FailedPrecondition(f"tool invocation {invocation_id} could not be finished; nothing was written",
                                 reason=Reason.INVOCATION_NOT_WRITABLE)

    def list_for_run(self, run_id: str, tool_name: str | None = None) -> list[ToolInvocation]:
        """Every invocation of the run that is not abandoned (only `tool_name`'s when given), in the
        order they were begun."""
        with self._connection() as connection:
            if tool_name is None:
                rows = connection.execute(_OF_RUN, {"run_id": run_id}).all()
            else:
                rows = connection.execute(_OF_RUN_AND_TOOL, {"run_id": run_id, "tool_name": tool_name}).all()
        return [invocation_from_row(row) for row in rows]

    def accounts_for_run(self, run_id: str) -> list[InvocationAccount]:
        """`InvocationAccount`s of the run's invocations that are not abandoned, in the order they were begun. The
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
                .where(ToolInvocationRow.run_id == run_id, ToolInvocationRow.abandoned == false())
                .order_by(ToolInvocationRow.invocation_id)
            ).all()
        return [InvocationAccount(tool_name=name, round=round_, lifecycle=lifecycle, evidence_status=status,
                                  deduped=bool(is_deduped), evidence_refs=int(count or 0))
                for name, round_, lifecycle, status, is_deduped, count in rows]

    def get_many(self, ids: Iterable[int]) -> list[ToolInvocation]:
        """The invocations with these ids that exist (any run, abandoned or not), ordered by id."""
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

    def abandoned_invocation_ids(self, run_id: str, ids: Iterable[int]) -> set[int]:
        """Which of these invocation ids are abandoned invocations of `run_id` (ids only are read)."""
        wanted = sorted({i for i in ids if isinstance(i, int) and not isinstance(i, bool) and 0 < i <= _MAX_ROW_ID})
        found: set[int] = set()
        with self._sessions() as session:
            for chunk in _chunks(wanted):
                found.update(session.scalars(
                    select(_TABLE.c.invocation_id)
                    .where(_TABLE.c.invocation_id.in_(chunk), _TABLE.c.run_id == run_id, _TABLE.c.abandoned)
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


def _refuse_closed(run_id: str, usage: RunUsage) -> None:
    if usage.status != OPEN_RUN_STATUS:
        raise FailedPrecondition(
            f"run {run_id} is {usage.status}: a finished run is immutable, nothing is added to it",
            reason=Reason.RUN_FINISHED, metadata={"status": usage.status},
        )


def _refuse_spent(run_id: str, usage: RunUsage, budget: RunBudget) -> None:
    if usage.invocations >= budget.max_invocations:
        raise ResourceExhausted(
            f"run {run_id} has used its budget of {budget.max_invocations} tool invocations; no further tool is run",
            reason=Reason.RUN_INVOCATION_BUDGET, metadata={"limit": budget.max_invocations},
        )
    if usage.evidence_bytes >= budget.max_evidence_bytes:
        raise ResourceExhausted(
            f"run {run_id} has used its budget of {budget.max_evidence_bytes} bytes of evidence; "
            "no further tool is run", reason=Reason.RUN_EVIDENCE_BUDGET, metadata={"limit": budget.max_evidence_bytes},
        )


# The key is an INTEGER (32-bit on PostgreSQL, whose driver casts parameters to the column type,
# so a larger cited id would fail the query instead of matching nothing).
_MAX_ROW_ID = 2**31 - 1
_MAX_TOOL_CALL_ID_CHARS = 200  # the column's length
_IN_CHUNK = 500  # bound parameters per statement


def _chunks(values: list[Any]) -> Iterable[list[Any]]:
    for start in range(0, len(values), _IN_CHUNK):
        yield values[start:start + _IN_CHUNK]
