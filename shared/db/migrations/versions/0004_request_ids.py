"""Request ids: a client's idempotency key on a run, unique per principal.

`diagnosis_run.request_id` is the key the request carried (NULL without one); the partial unique
index `uq_diagnosis_run_principal_request_id` on (principal, request_id) holds only live claims:
rows with a request_id that was not released. A claim is released (`request_id_released`) when its
run was cancelled or is older than the retention window and the same key starts a new run; the
released row keeps its request_id for the audit. NULL request_ids never collide (neither
SQLite nor PostgreSQL counts NULLs equal in a unique index; the predicate leaves them out anyway).
Existing rows: NULL and not released.

Revision ID: 0004_request_ids
Revises: 0003_executor_attempts
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_request_ids"
down_revision: str | None = "0003_executor_attempts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIVE_CLAIM = "request_id IS NOT NULL AND NOT request_id_released"


def upgrade() -> None:
    op.add_column("diagnosis_run", sa.Column("request_id", sa.String(128), nullable=True))
    op.add_column("diagnosis_run",
                  sa.Column("request_id_released", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_index("uq_diagnosis_run_principal_request_id", "diagnosis_run", ["principal", "request_id"],
                    unique=True, sqlite_where=sa.text(LIVE_CLAIM), postgresql_where=sa.text(LIVE_CLAIM))
    # ListRuns: a session's runs, newest first.
    op.create_index("ix_diagnosis_run_session_created", "diagnosis_run", ["session_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_diagnosis_run_session_created", table_name="diagnosis_run")
    op.drop_index("uq_diagnosis_run_principal_request_id", table_name="diagnosis_run")
    with op.batch_alter_table("diagnosis_run") as batch:
        batch.drop_column("request_id_released")
        batch.drop_column("request_id")
