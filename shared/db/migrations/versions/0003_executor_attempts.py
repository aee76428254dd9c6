"""Attempts of (run, round): when the executor replica running a round is lost,
the gateway retries once; the retry's start marks the lost attempt's invocations abandoned.

`executor_attempt` holds the attempt of each (run, round) started last; `tool_invocation` says
which attempt wrote each row and whether it was abandoned. Rows written before attempts existed
are attempt 0 and not abandoned.

Revision ID: 0003_executor_attempts
Revises: 0002_principals
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_executor_attempts"
down_revision: str | None = "0002_principals"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # NOT NULL columns with server defaults: existing rows are filled on SQLite and PostgreSQL alike.
    op.add_column("tool_invocation", sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("tool_invocation",
                  sa.Column("abandoned", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "executor_attempt",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("diagnosis_run.run_id"), primary_key=True),
        sa.Column("round", sa.Integer(), primary_key=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("executor_attempt")
    with op.batch_alter_table("tool_invocation") as batch:
        batch.drop_column("abandoned")
        batch.drop_column("attempt")
