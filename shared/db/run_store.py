"""Sessions, runs, the self-evaluation channels and the orchestration event log (DESIGN §4)."""

from __future__ import annotations

import random
import secrets
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import CursorResult, Result, and_, false, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from shared.core.contracts import TimeWindow
from shared.core.follow_up import InheritedContext
from shared.db.invocation_store import invocation_from_row
from shared.db.models import (
    DEFAULT_PRINCIPAL,
    EVENT_PHASES,
    RUN_STATUSES,
    OrchestrationEventRow,
    RunRow,
    SessionRow,
    ToolInvocationRow,
    utcnow,
)

# The only keys of diagnosis_run.self_evaluation; each has exactly one writer. `answer`:
# the structured answer as released and whether a retry may help, written once by the gateway as
# the run finishes, so that a replayed request_id answers exactly as the run did.
SELF_EVALUATION_CHANNELS: frozenset[str] = frozenset(
    {"rule_evaluation", "aiops_rule_evaluation", "verifier_evaluation", "answer"}
)
_RUN = RunRow.__table__
_BACKOFF_BASE_SECONDS = 0.005
_BACKOFF_CAP_SECONDS = 0.2
_EVENT_SEQ_ATTEMPTS = 10


class ConcurrentWriteError(RuntimeError):
    """A channel write or event append kept colliding with other writers beyond its retries."""


class RunNotRunning(Exception):
    """finish_run: the run is no longer RUNNING (another writer ended it first, e.g. the reaper
    after this gateway lost its heartbeat); its outcome stands and nothing was written."""

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(f"run {run_id} is already {status}")
        self.run_id = run_id
        self.status = status


class RequestIdTaken(Exception):
    """start_run: the principal's request id already names a live run (the unique index said so:
    another request with the same id won the race)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"the request id names run {run_id}")
        self.run_id = run_id


def new_id() -> str:
    """An unguessable identifier: knowing one run's id tells nothing about another's."""
    return secrets.token_hex(16)


def _backoff(attempt: int) -> None:
    """Full-jitter exponential backoff, so writers that collided do not collide again."""
    time.sleep(random.uniform(0, min(_BACKOFF_CAP_SECONDS, _BACKOFF_BASE_SECONDS * 2**attempt)))


def _rowcount(result: Result[Any]) -> int:
    """The rows an UPDATE matched (its result is a CursorResult, typed as the general Result)."""
    if not isinstance(result, CursorResult):
        raise TypeError(f"expected the result of a DML statement, got {type(result).__name__}")
    return result.rowcount


def _check_channel(channel: str) -> None:
    if channel not in SELF_EVALUATION_CHANNELS:
        raise ValueError(
            f"unknown self_evaluation channel {channel!r}; expected one of {sorted(SELF_EVALUATION_CHANNELS)}"
        )


def _check_phases(events: list[dict[str, Any]]) -> None:
    for event in events:
        if event["phase"] not in EVENT_PHASES:
            raise ValueError(f"unknown event phase {event['phase']!r}; expected one of {EVENT_PHASES}")


def _event_rows(run_id: str, events: list[dict[str, Any]], seqs: list[int] | None = None) -> list[dict[str, Any]]:
    """The orchestration_event rows of `events`, numbered by `seqs` (default: each event's own)."""
    now = utcnow()
    _check_phases(events)
    numbers = seqs if seqs is not None else [int(event["seq"]) for event in events]
    return [{"run_id": run_id, "seq": seq, "node": event["node"], "phase": event["phase"],
             "status": event.get("status", ""), "reason": event.get("reason", ""),
             "payload": event.get("payload"), "created_at": event.get("created_at") or now}
            for seq, event in zip(numbers, events, strict=True)]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def stored_time(text: str) -> datetime:
    """A timestamp as `_iso` rendered it, aware (SQLite hands them back without their zone;
    every stored one is UTC)."""
    value = datetime.fromisoformat(text)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class RunStore:
    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self._sessions = session_factory

    # --- sessions and runs --------------------------------------------------------------------

    def create_session(self, client_label: str = "", principal: str = DEFAULT_PRINCIPAL) -> str:
        session_id = new_id()
        with self._sessions() as session:
            session.add(SessionRow(session_id=session_id, client_label=client_label, principal=principal))
            session.commit()
        return session_id

    def session_exists(self, session_id: str) -> bool:
        with self._sessions() as session:
            return session.get(SessionRow, session_id) is not None

    def session_principal(self, session_id: str) -> str | None:
        """The principal that owns the session; None when there is no such session."""
        with self._sessions() as session:
            return session.scalar(select(SessionRow.principal).where(SessionRow.session_id == session_id))

    def create_run(self, session_id: str, query: str, mode: str, trace_id: str | None = None) -> str:
        """A new RUNNING run in an existing session (with the trace it runs in, when known)."""
        with self._sessions() as session:
            principal = session.scalar(select(SessionRow.principal).where(SessionRow.session_id == session_id))
        return self.start_run(session_id, query, mode, trace_id, principal=principal or DEFAULT_PRINCIPAL)[1]

    def start_run(self, session_id: str | None, query: str, mode: str, trace_id: str | None = None,
                  client_label: str = "", principal: str = DEFAULT_PRINCIPAL, *, request_id: str | None = None,
                  request_ids_since: datetime | None = None,
                  gateway_instance: str | None = None) -> tuple[str, str]:
        """(session_id, run_id) of a new RUNNING run of `principal`; without a session_id a new
        session (labelled `client_label`, owned by `principal`) is created with it, in the same
        transaction. Whether an existing session is the principal's is the caller's check.

        With `request_id` the run claims (principal, request_id): in the same
        transaction an earlier claim of it is released when its run was cancelled or created
        before `request_ids_since` (the retention window); if a live claim remains, the unique
        index refuses the insert and RequestIdTaken names the run that holds it.

        `gateway_instance`: the gateway process that runs it, which keeps its heartbeat fresh."""
        run_id = new_id()
        new_session = session_id is None
        with self._sessions() as session:
            try:
                if request_id is not None:
                    stale = RunRow.status == "CANCELLED"
                    if request_ids_since is not None:
                        stale = or_(stale, RunRow.created_at < request_ids_since)
                    session.execute(
                        update(RunRow)
                        .where(RunRow.principal == principal, RunRow.request_id == request_id,
                               RunRow.request_id_released == false(), stale)
                        .values(request_id_released=True)
                        .execution_options(synchronize_session=False)
                    )
                if new_session:
                    session_id = new_id()
                    session.execute(insert(SessionRow.__table__).values(
                        session_id=session_id, client_label=client_label, principal=principal))
                session.execute(insert(_RUN).values(
                    run_id=run_id, session_id=session_id, principal=principal, query=query, mode=mode,
                    status="RUNNING", trace_id=trace_id, request_id=request_id,
                    gateway_instance=gateway_instance, heartbeat_at=utcnow() if gateway_instance else None))
                session.commit()
            except IntegrityError:
                session.rollback()
                if request_id is None:
                    raise
                holder = self.request_claim(principal, request_id)
                if holder is None:
                    raise
                raise RequestIdTaken(holder["run_id"]) from None
        assert session_id is not None
        return session_id, run_id

    def request_claim(self, principal: str, request_id: str) -> dict[str, Any] | None:
        """The run holding the principal's live claim on `request_id` (its columns and
        self_evaluation), whatever its status and age; None when no claim is held."""
        with self._sessions() as session:
            run = session.scalar(select(RunRow).where(
                RunRow.principal == principal, RunRow.request_id == request_id, RunRow.request_id_released == false()))
            if run is None:
                return None
            return {**_run_columns(run), "self_evaluation": run.self_evaluation or {}}

    def run_status(self, run_id: str) -> str | None:
        with self._sessions() as session:
            return session.scalar(select(RunRow.status).where(RunRow.run_id == run_id))

    def list_runs(self, session_id: str | None, limit: int,
                  before: tuple[datetime, str] | None = None, *, principal: str | None = None) -> list[dict[str, Any]]:
        """At most `limit` runs, newest first (by created_at, then run_id), after the (created_at,
        run_id) key `before` when given; their columns only. The runs of the session `session_id`,
        of `principal` (across its sessions), or both filters at once; one of them is required, so
        that no call lists every caller's runs."""
        if session_id is None and principal is None:
            raise ValueError("list_runs needs a session_id or a principal")
        with self._sessions() as session:
            query = select(RunRow)
            if session_id is not None:
                query = query.where(RunRow.session_id == session_id)
            if principal is not None:
                query = query.where(RunRow.principal == principal)
            if before is not None:
                created, last_id = before
                query = query.where(or_(RunRow.created_at < created,
                                        and_(RunRow.created_at == created, RunRow.run_id < last_id)))
            rows = session.scalars(
                query.order_by(RunRow.created_at.desc(), RunRow.run_id.desc()).limit(limit)
            ).all()
            return [_run_columns(row) for row in rows]

    def finish_run(
        self,
        run_id: str,
        *,
        status: str,
        effective_verdict: str | None = None,
        fallback_type: str | None = None,
        answer: str | None = None,
        trace_id: str | None = None,
        channels: dict[str, dict[str, Any]] | None = None,
        events: list[dict[str, Any]] | None = None,
        max_retries: int = 10,
    ) -> None:
        """Record the outcome. The verdict stays NULL unless one was computed: never invented.

        The run's last write can carry the rest of it, all in the same transaction: `channels`
        (self_evaluation channels, set as `write_channel` sets them, under the same optimistic
        check) and `events` (each with its `seq`, as `record_events` writes such a batch)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}")
        values: dict[str, Any] = {
            "status": status,
            "effective_verdict": effective_verdict,
            "fallback_type": fallback_type,
            "answer": answer,
            "finished_at": utcnow(),
        }
        if trace_id is not None:
            values["trace_id"] = trace_id
        for channel in channels or {}:
            _check_channel(channel)
        rows = _event_rows(run_id, events or [])
        for attempt in range(max_retries + 1):
            with self._sessions() as session:
                try:
                    if rows:
                        session.execute(insert(OrchestrationEventRow.__table__), rows)
                    written = self._set_run(session, run_id, values, channels or {}, running_only=True)
                    if written:
                        close_open_invocations(session, run_id, f"the run ended {status} before the call finished")
                        session.commit()
                        return
                    session.rollback()
                except IntegrityError:
                    session.rollback()
                    if session.get(RunRow, run_id) is None:
                        raise LookupError(f"run {run_id} does not exist") from None
                    raise ConcurrentWriteError(f"run {run_id}: seqs {rows[0]['seq']}..{rows[-1]['seq']} are taken") from None
            if attempt < max_retries:
                _backoff(attempt)
        raise ConcurrentWriteError(f"run {run_id}: its outcome still conflicted after {max_retries} retries")

    @staticmethod
    def _set_run(session: Session, run_id: str, values: dict[str, Any], channels: dict[str, dict[str, Any]],
                 *, running_only: bool = False) -> bool:
        """Update the run's row with `values` and `channels` merged into its self_evaluation, if
        no other writer changed the document since it was read; False when one did. With
        `running_only` only a RUNNING run is written (RunNotRunning otherwise): a run's outcome,
        once written, is never replaced."""
        # Table statements: the ORM's bulk-update machinery costs more than these writes.
        running = [_RUN.c.status == "RUNNING"] if running_only else []
        if not channels:
            result = session.execute(update(_RUN).where(_RUN.c.run_id == run_id, *running).values(**values))
            if _rowcount(result) != 1:
                RunStore._refuse_write(session, run_id)
            return True
        current = session.execute(
            select(_RUN.c.self_evaluation, _RUN.c.version, _RUN.c.status).where(_RUN.c.run_id == run_id)
        ).one_or_none()
        if current is None:
            raise LookupError(f"run {run_id} does not exist")
        if running_only and current.status != "RUNNING":
            raise RunNotRunning(run_id, current.status)
        document = {**(current.self_evaluation or {}), **channels}
        result = session.execute(
            update(_RUN)
            .where(_RUN.c.run_id == run_id, _RUN.c.version == current.version, *running)
            .values(**values, self_evaluation=document, version=current.version + 1)
        )
        return _rowcount(result) == 1

    @staticmethod
    def _refuse_write(session: Session, run_id: str) -> None:
        status = session.scalar(select(_RUN.c.status).where(_RUN.c.run_id == run_id))
        if status is None:
            raise LookupError(f"run {run_id} does not exist")
        raise RunNotRunning(run_id, status)

    # --- heartbeats and interrupted runs ------------------------------------------------------

    def probe_write(self) -> None:
        """Write and delete a throwaway session, each committed: raises while the store cannot
        take writes (a rolled-back write may never touch the disk, so proves nothing)."""
        probe = f"write-probe-{new_id()}"
        with self._sessions() as session:
            session.execute(insert(SessionRow.__table__).values(session_id=probe, client_label="write probe"))
            session.commit()
            session.execute(SessionRow.__table__.delete().where(SessionRow.__table__.c.session_id == probe))
            session.commit()

    def beat(self, run_ids: list[str]) -> int:
        """Stamp the heartbeat of those of `run_ids` still RUNNING; how many were."""
        if not run_ids:
            return 0
        with self._sessions() as session:
            result = session.execute(update(_RUN).where(_RUN.c.run_id.in_(run_ids), _RUN.c.status == "RUNNING")
                                     .values(heartbeat_at=utcnow()))
            session.commit()
            return _rowcount(result)

    def stale_runs(self, cutoff: datetime, limit: int = 100) -> list[dict[str, Any]]:
        """RUNNING runs whose heartbeat (or, with none, whose start) is older than `cutoff`."""
        with self._sessions() as session:
            rows = session.execute(
                select(_RUN.c.run_id, _RUN.c.query, _RUN.c.gateway_instance, _RUN.c.heartbeat_at)
                .where(_RUN.c.status == "RUNNING", _stale_before(cutoff))
                .order_by(_RUN.c.created_at).limit(limit)
            ).all()
        return [{"run_id": row.run_id, "query": row.query, "gateway_instance": row.gateway_instance,
                 "heartbeat_at": _iso(row.heartbeat_at)} for row in rows]

    def running_runs(self, gateway_instance: str) -> list[dict[str, Any]]:
        """The RUNNING runs of one gateway process."""
        with self._sessions() as session:
            rows = session.execute(
                select(_RUN.c.run_id, _RUN.c.query)
                .where(_RUN.c.status == "RUNNING", _RUN.c.gateway_instance == gateway_instance)
            ).all()
        return [{"run_id": row.run_id, "query": row.query} for row in rows]

    def interrupt_run(self, run_id: str, *, fallback_type: str, answer: str, reason: str,
                      channels: dict[str, dict[str, Any]], event: dict[str, Any],
                      stale_before: datetime | None = None, gateway_instance: str | None = None) -> bool:
        """End a run its gateway can no longer finish, in one transaction: status FALLBACK with
        `fallback_type` and the fixed `answer`, `channels` merged into self_evaluation (the
        verifier_evaluation channel keeps what was there and gains the failure reason), `event`
        appended after the run's last one (the terminal event that closes its log), and its
        PROJECTING invocations closed as ERROR with `reason`.

        Only a run still RUNNING, and (`stale_before`) whose heartbeat is older than that, or
        (`gateway_instance`) of that gateway: the conditional UPDATE decides, so of several
        replicas reaping at once exactly one ends the run. False when it was not this call's to end."""
        for channel in channels:
            _check_channel(channel)
        conditions = [_RUN.c.run_id == run_id, _RUN.c.status == "RUNNING"]
        if stale_before is not None:
            conditions.append(_stale_before(stale_before))
        if gateway_instance is not None:
            conditions.append(_RUN.c.gateway_instance == gateway_instance)
        events = OrchestrationEventRow.__table__
        with self._sessions() as session:
            claimed = session.execute(update(_RUN).where(*conditions).values(
                status="FALLBACK", fallback_type=fallback_type, effective_verdict=None, answer=answer,
                finished_at=utcnow(), version=_RUN.c.version + 1))
            if _rowcount(claimed) != 1:
                session.rollback()
                return False
            # The run is ours now (its row is written in this transaction): no channel writer or
            # event writer of the lost gateway can come between the reads and writes below.
            document = session.scalar(select(_RUN.c.self_evaluation).where(_RUN.c.run_id == run_id)) or {}
            merged = {**document, **channels}
            if "verifier_evaluation" in channels:
                merged["verifier_evaluation"] = {**(document.get("verifier_evaluation") or {}),
                                                 **channels["verifier_evaluation"]}
            session.execute(update(_RUN).where(_RUN.c.run_id == run_id).values(self_evaluation=merged))
            last = session.scalar(select(func.max(events.c.seq)).where(events.c.run_id == run_id))
            session.execute(insert(events), _event_rows(run_id, [event], [(last or 0) + 1]))
            close_open_invocations(session, run_id, reason)
            session.commit()
        return True

    def last_planned_context(self, session_id: str, max_runs: int = 20) -> InheritedContext | None:
        """What a follow-up in the session inherits: the services and window
        of its newest run whose first plan named services, as that run's round-0 planner EXIT
        event recorded them; None when none of its last `max_runs` runs planned any."""
        events = OrchestrationEventRow.__table__
        runs = RunRow.__table__
        with self._sessions() as session:
            newest = select(runs.c.run_id, runs.c.created_at).where(runs.c.session_id == session_id) \
                .order_by(runs.c.created_at.desc(), runs.c.run_id.desc()).limit(max_runs).subquery()
            rows = session.execute(
                select(newest.c.run_id, events.c.payload)
                .join(events, events.c.run_id == newest.c.run_id)
                .where(events.c.node == "planner", events.c.phase == "EXIT")
                .order_by(newest.c.created_at.desc(), newest.c.run_id.desc(), events.c.seq)
            ).all()
        for run_id, payload in rows:
            payload = payload or {}
            services = [str(s) for s in payload.get("services") or [] if isinstance(s, str)]
            if payload.get("round", 0) != 0 or not services:
                continue
            window = payload.get("window")
            inherited_window = None
            if isinstance(window, dict) and isinstance(window.get("start"), str) and isinstance(window.get("end"), str):
                inherited_window = TimeWindow(start=window["start"], end=window["end"])
            return InheritedContext(run_id=run_id, services=tuple(services), window=inherited_window)
        return None

    def run_session_id(self, run_id: str) -> str | None:
        with self._sessions() as session:
            return session.scalar(select(RunRow.session_id).where(RunRow.run_id == run_id))

    # --- self_evaluation channels -------------------------------------------------------------

    def write_channel(
        self, run_id: str, channel: str, value: dict[str, Any], max_retries: int = 10
    ) -> None:
        """Set one channel of the run's self_evaluation, leaving the other channels untouched.

        Optimistic concurrency: read the document and its version, then write it back only if the
        version is unchanged (a compare-and-set in one UPDATE, atomic on SQLite and PostgreSQL
        alike). A writer that lost the race re-reads and tries again after a jittered backoff.
        """
        _check_channel(channel)
        for attempt in range(max_retries + 1):
            with self._sessions() as session:
                written = self._set_run(session, run_id, {}, {channel: value})
                session.commit()
            if written:
                return
            if attempt < max_retries:
                _backoff(attempt)
        raise ConcurrentWriteError(
            f"self_evaluation.{channel} of run {run_id}: still conflicting after {max_retries} retries"
        )

    # --- orchestration events -----------------------------------------------------------------

    def record_event(
        self,
        run_id: str,
        node: str,
        phase: str,
        status: str = "",
        reason: str = "",
        payload: dict[str, Any] | None = None,
    ) -> int:
        """Append an event to the run's log; returns its `seq` (1, 2, 3... per run)."""
        return self.record_events(
            run_id, [{"node": node, "phase": phase, "status": status, "reason": reason, "payload": payload}]
        )[0]

    def record_events(self, run_id: str, events: list[dict[str, Any]], next_seq: int | None = None) -> list[int]:
        """Append events (dicts of node, phase and optional status, reason, payload, created_at)
        to the run's log in one transaction, in order; returns their seqs.

        The next seq is read and the rows inserted in the same transaction; a writer that knows
        it (the run's only writer does: one past the last seq it got back) passes `next_seq` and
        saves the read. Two writers that pick the same seq collide on the unique (run_id, seq)
        constraint; the loser reads the seq and retries.

        Events that each carry their `seq` are written with it, or not at all: a collision raises
        ConcurrentWriteError instead of renumbering them (the gateway has already streamed those
        seqs to the client).
        """
        _check_phases(events)
        if not events:
            return []
        given = [event.get("seq") for event in events]
        fixed = all(seq is not None for seq in given)
        if not fixed and any(seq is not None for seq in given):
            raise ValueError("either every event of a batch carries its seq or none does")
        table = OrchestrationEventRow.__table__
        for attempt in range(_EVENT_SEQ_ATTEMPTS):
            with self._sessions() as session:
                try:
                    if fixed:
                        seqs = [int(seq) for seq in given if seq is not None]
                    else:
                        if next_seq is not None:
                            first, next_seq = next_seq, None  # a guess: a collision falls back to reading
                        else:
                            last = session.execute(
                                select(func.max(table.c.seq)).where(table.c.run_id == run_id)
                            ).scalar_one()
                            first = (last or 0) + 1
                        seqs = list(range(first, first + len(events)))
                    session.execute(insert(table), _event_rows(run_id, events, seqs))
                    session.commit()
                except IntegrityError:
                    session.rollback()
                    # A missing run fails the foreign key, not the seq: say so instead of retrying.
                    if session.get(RunRow, run_id) is None:
                        raise LookupError(f"run {run_id} does not exist") from None
                    if fixed:
                        raise ConcurrentWriteError(f"run {run_id}: seqs {seqs[0]}..{seqs[-1]} are taken") from None
                    _backoff(attempt)
                    continue
            return seqs
        raise ConcurrentWriteError(f"could not append events to run {run_id}")

    # --- audit view ---------------------------------------------------------------------------

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The run with its self_evaluation, events and invocations, as JSON-ready dicts."""
        with self._sessions() as session:
            run = session.get(RunRow, run_id)
            if run is None:
                return None
            events = session.scalars(
                select(OrchestrationEventRow)
                .where(OrchestrationEventRow.run_id == run_id)
                .order_by(OrchestrationEventRow.seq)
            ).all()
            invocations = session.scalars(
                select(ToolInvocationRow)
                .where(ToolInvocationRow.run_id == run_id)
                .order_by(ToolInvocationRow.invocation_id)
            ).all()
            return {
                **_run_columns(run),
                "self_evaluation": run.self_evaluation or {},
                "version": run.version,
                "events": [_event(event) for event in events],
                "invocations": [_invocation(row) for row in invocations],
            }

    def run_header(self, run_id: str) -> dict[str, Any] | None:
        """The run's columns and self_evaluation, without its events and invocations."""
        with self._sessions() as session:
            run = session.get(RunRow, run_id)
            if run is None:
                return None
            return {**_run_columns(run), "self_evaluation": run.self_evaluation or {}, "version": run.version}

    def events_after(self, run_id: str, after_seq: int, limit: int) -> list[dict[str, Any]]:
        """At most `limit` of the run's events with a seq above `after_seq`, in order."""
        with self._sessions() as session:
            rows = session.scalars(
                select(OrchestrationEventRow)
                .where(OrchestrationEventRow.run_id == run_id, OrchestrationEventRow.seq > after_seq)
                .order_by(OrchestrationEventRow.seq)
                .limit(limit)
            ).all()
            return [_event(row) for row in rows]

    def invocations_after(self, run_id: str, after_id: int, limit: int) -> list[dict[str, Any]]:
        """At most `limit` of the run's invocations with an invocation_id above `after_id`, in order."""
        with self._sessions() as session:
            rows = session.scalars(
                select(ToolInvocationRow)
                .where(ToolInvocationRow.run_id == run_id, ToolInvocationRow.invocation_id > after_id)
                .order_by(ToolInvocationRow.invocation_id)
                .limit(limit)
            ).all()
            return [_invocation(row) for row in rows]

    def run_counts(self, run_id: str) -> dict[str, Any]:
        """How many events and invocations the run has, and its invocations per evidence status
        and per tool (counted in the database: nothing of the results is read). Abandoned
        invocations are counted apart, as `invocations_abandoned`."""
        events = OrchestrationEventRow.__table__
        invocations = ToolInvocationRow.__table__
        with self._sessions() as session:
            event_count = session.execute(
                select(func.count()).select_from(events).where(events.c.run_id == run_id)
            ).scalar_one()
            current = (invocations.c.run_id == run_id, invocations.c.abandoned == false())
            by_status = session.execute(
                select(invocations.c.evidence_status, func.count())
                .where(*current)
                .group_by(invocations.c.evidence_status)
            ).all()
            by_tool = session.execute(
                select(invocations.c.tool_name, func.count())
                .where(*current)
                .group_by(invocations.c.tool_name)
            ).all()
            abandoned = session.execute(
                select(func.count()).select_from(invocations)
                .where(invocations.c.run_id == run_id, invocations.c.abandoned)
            ).scalar_one()
        return {
            "events": event_count,
            "invocations": sum(count for _, count in by_status),
            "invocations_by_evidence_status": {status or "NONE": count for status, count in by_status},
            "invocations_by_tool": {tool: count for tool, count in by_tool},
            # A lost attempt's invocations, listed (flagged) but counted above never.
            "invocations_abandoned": abandoned,
        }


def _stale_before(cutoff: datetime) -> Any:
    """A run's heartbeat is older than `cutoff`; a run without one (started before heartbeats
    existed) by its start."""
    return func.coalesce(_RUN.c.heartbeat_at, _RUN.c.created_at) < cutoff


def close_open_invocations(session: Session, run_id: str, reason: str) -> int:
    """The run's invocations still PROJECTING (their executor was lost, or the run ended before
    they finished) become ERROR with `reason`: none is left half-open once its run has ended."""
    table = ToolInvocationRow.__table__
    result = session.execute(
        update(table).where(table.c.run_id == run_id, table.c.lifecycle == "PROJECTING")
        .values(lifecycle="ERROR", evidence_status="ERROR", error=reason[:500], completed_at=utcnow())
    )
    return _rowcount(result)


def _run_columns(run: RunRow) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "session_id": run.session_id,
        "principal": run.principal,
        "query": run.query,
        "mode": run.mode,
        "status": run.status,
        "effective_verdict": run.effective_verdict,
        "fallback_type": run.fallback_type,
        "trace_id": run.trace_id,
        "answer": run.answer,
        "created_at": _iso(run.created_at),
        "finished_at": _iso(run.finished_at),
        "request_id": run.request_id,
    }


def _event(event: OrchestrationEventRow) -> dict[str, Any]:
    return {
        "event_id": event.event_id,
        "seq": event.seq,
        "node": event.node,
        "phase": event.phase,
        "status": event.status,
        "reason": event.reason,
        "payload": event.payload,
        "created_at": _iso(event.created_at),
    }


def _invocation(row: ToolInvocationRow) -> dict[str, Any]:
    return {
        **invocation_from_row(row).model_dump(mode="json"),
        "created_at": _iso(row.created_at),
        "completed_at": _iso(row.completed_at),
    }
