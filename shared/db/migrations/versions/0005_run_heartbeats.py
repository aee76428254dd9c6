"""Run heartbeats: which gateway runs a RUNNING run, and when it last said so.

`diagnosis_run.gateway_instance` names the gateway process that started the run;
`heartbeat_at` is the last time that process stamped it as still running. Any replica ends a
RUNNING run whose heartbeat is older than the reap bound (its gateway died) with RUN_INTERRUPTED.
The index serves that search. Existing rows: NULL in both (a NULL heartbeat counts as the run's
`created_at`, so a run left RUNNING before this migration is reaped too).

Revision ID: 0005_run_heartbeats
Revises: 0004_request_ids
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_run_heartbeats"
down_revision: str | None = "0004_request_ids"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("diagnosis_run", sa.Column("gateway_instance", sa.String(64), nullable=True))
    op.add_column("diagnosis_run", sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_diagnosis_run_status_heartbeat", "diagnosis_run", ["status", "heartbeat_at"])


def downgrade() -> None:
    op.drop_index("ix_diagnosis_run_status_heartbeat", table_name="diagnosis_run")
    with op.batch_alter_table("diagnosis_run") as batch:
        batch.drop_column("heartbeat_at")
        batch.drop_column("gateway_instance")
