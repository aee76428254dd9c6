"""The four tables of DESIGN §4: sessions, runs, tool invocations, orchestration events.

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out here rather than imported from the models: a migration must not change when the
# models change later.
JSON_DOCUMENT = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True), "postgresql"
)


def upgrade() -> None:
    op.create_table(
        "diagnosis_session",
        sa.Column("session_id", sa.String(64), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("client_label", sa.String(200), nullable=False),
    )
    op.create_table(
        "diagnosis_run",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column(
            "session_id",
            sa.String(64),
            sa.ForeignKey("diagnosis_session.session_id"),
            nullable=False,
        ),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("mode", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("effective_verdict", sa.String(16), nullable=True),
        sa.Column("fallback_type", sa.String(64), nullable=True),
        sa.Column("trace_id", sa.String(32), nullable=True),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("self_evaluation", JSON_DOCUMENT, nullable=True),
        sa.Column("version", sa.Integer(), nullable=False, server_default="0"),
    )
    op.create_index("ix_diagnosis_run_session_id", "diagnosis_run", ["session_id"])
    op.create_table(
        "tool_invocation",
        sa.Column("invocation_id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "run_id", sa.String(64), sa.ForeignKey("diagnosis_run.run_id"), nullable=False
        ),
        sa.Column("tool_call_id", sa.String(200), nullable=False),
        sa.Column("tool_name", sa.String(100), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("lifecycle", sa.String(16), nullable=False),
        sa.Column("evidence_status", sa.String(32), nullable=True),
        sa.Column("request", JSON_DOCUMENT, nullable=True),
        sa.Column("agent_result", sa.Text(), nullable=True),
        sa.Column("retrieval_details", JSON_DOCUMENT, nullable=True),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_tool_invocation_run_id", "tool_invocation", ["run_id"])
    op.create_table(
        "orchestration_event",
        sa.Column("event_id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "run_id", sa.String(64), sa.ForeignKey("diagnosis_run.run_id"), nullable=False
        ),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(64), nullable=False),
        sa.Column("phase", sa.String(8), nullable=False),
        sa.Column("status", sa.String(64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("payload", JSON_DOCUMENT, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("run_id", "seq", name="uq_orchestration_event_run_seq"),
    )
    op.create_index("ix_orchestration_event_run_id", "orchestration_event", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_orchestration_event_run_id", table_name="orchestration_event")
    op.drop_table("orchestration_event")
    op.drop_index("ix_tool_invocation_run_id", table_name="tool_invocation")
    op.drop_table("tool_invocation")
    op.drop_index("ix_diagnosis_run_session_id", table_name="diagnosis_run")
    op.drop_table("diagnosis_run")
    op.drop_table("diagnosis_session")
