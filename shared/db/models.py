"""ORM tables. The schema itself is created by the Alembic migrations, never by `create_all`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# JSONB on PostgreSQL (indexable, compact); a Python None is stored as SQL NULL, not JSON null.
# The engines write them with shared/db/stored_json.py: NaN and Infinity become strings there.
JsonDocument = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")

# The principal of rows written before principals existed, and of a gateway without tokens.
DEFAULT_PRINCIPAL = "default"
RUN_STATUSES: tuple[str, ...] = ("RUNNING", "COMPLETED", "FALLBACK", "FAILED", "CANCELLED")
EVENT_PHASES: tuple[str, ...] = ("ENTER", "EXIT", "INFO")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    # Every table here is a plain Table (DeclarativeBase types it as FromClause, which
    # insert() and update() do not accept).
    __table__: ClassVar[Table]


class SessionRow(Base):
    """A chat session: the runs one client asked in sequence."""

    __tablename__ = "diagnosis_session"

    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    client_label: Mapped[str] = mapped_column(String(200), default="")
    # The caller that created the session and alone may continue it or read its runs.
    principal: Mapped[str] = mapped_column(String(64), server_default=DEFAULT_PRINCIPAL)


# The rows of uq_diagnosis_run_principal_request_id: request ids whose claim was not released.
REQUEST_ID_LIVE_CLAIM = "request_id IS NOT NULL AND NOT request_id_released"


class RunRow(Base):
    """One diagnosis: the question, its outcome and the self-evaluation channels."""

    __tablename__ = "diagnosis_run"
    __table_args__ = (
        # One live run per (principal, request_id); the index decides a race.
        Index("uq_diagnosis_run_principal_request_id", "principal", "request_id", unique=True,
              sqlite_where=text(REQUEST_ID_LIVE_CLAIM), postgresql_where=text(REQUEST_ID_LIVE_CLAIM)),
        Index("ix_diagnosis_run_session_created", "session_id", "created_at"),
        Index("ix_diagnosis_run_principal_created", "principal", "created_at"),
        Index("ix_diagnosis_run_status_heartbeat", "status", "heartbeat_at"),
    )

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(
        ForeignKey("diagnosis_session.session_id"), index=True
    )
    # Its session's principal, kept on the run so that every read of a run can check it.
    principal: Mapped[str] = mapped_column(String(64), server_default=DEFAULT_PRINCIPAL)
    query: Mapped[str] = mapped_column(Text)
    mode: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), default="RUNNING")
    effective_verdict: Mapped[str | None] = mapped_column(String(16))
    fallback_type: Mapped[str | None] = mapped_column(String(64))
    trace_id: Mapped[str | None] = mapped_column(String(32))
    answer: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    self_evaluation: Mapped[dict[str, Any] | None] = mapped_column(JsonDocument)
    # Bumped by every self_evaluation write: the compare-and-set token of RunStore.write_channel.
    version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The client's idempotency key, and whether its claim was released (the run
    # was cancelled or aged past the retention window, and the key started a new run).
    request_id: Mapped[str | None] = mapped_column(String(128))
    request_id_released: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The gateway process running the run, and when it last stamped the run as still running: a
    # RUNNING run whose heartbeat is older than the reap bound lost its gateway (run_reaper.py).
    gateway_instance: Mapped[str | None] = mapped_column(String(64))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ToolInvocationRow(Base):
    """One tool call, persisted before its result is used (DESIGN §2)."""

    __tablename__ = "tool_invocation"

    invocation_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("diagnosis_run.run_id"), index=True)
    tool_call_id: Mapped[str] = mapped_column(String(200), default="")
    tool_name: Mapped[str] = mapped_column(String(100))
    round: Mapped[int] = mapped_column(Integer, default=0)
    lifecycle: Mapped[str] = mapped_column(String(16), default="PROJECTING")
    evidence_status: Mapped[str | None] = mapped_column(String(32))
    request: Mapped[dict[str, Any] | None] = mapped_column(JsonDocument)
    agent_result: Mapped[str | None] = mapped_column(Text)
    retrieval_details: Mapped[dict[str, Any] | None] = mapped_column(JsonDocument)
    error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Which attempt of (run, round) wrote it; set when a later attempt of (run, round) started:
    # kept for the audit, never cited or counted.
    attempt: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    abandoned: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class ExecutorAttemptRow(Base):
    """The attempt of (run, round) the executor started last: only it may write."""

    __tablename__ = "executor_attempt"

    run_id: Mapped[str] = mapped_column(ForeignKey("diagnosis_run.run_id"), primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class OrchestrationEventRow(Base):
    """A step of the diagnosis graph (node entered/left/noted), in order within its run."""

    __tablename__ = "orchestration_event"
    __table_args__ = (UniqueConstraint("run_id", "seq", name="uq_orchestration_event_run_seq"),)

    event_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("diagnosis_run.run_id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(64))
    phase: Mapped[str] = mapped_column(String(8))
    status: Mapped[str] = mapped_column(String(64), default="")
    reason: Mapped[str] = mapped_column(Text, default="")
    payload: Mapped[dict[str, Any] | None] = mapped_column(JsonDocument)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
