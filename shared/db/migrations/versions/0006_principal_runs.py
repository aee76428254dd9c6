"""A caller's runs across its sessions: ListRuns without a session lists the principal's runs,
newest first, and this index on (principal, created_at) serves that search.

Revision ID: 0006_principal_runs
Revises: 0005_run_heartbeats
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006_principal_runs"
down_revision: str | None = "0005_run_heartbeats"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_diagnosis_run_principal_created", "diagnosis_run", ["principal", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_diagnosis_run_principal_created", table_name="diagnosis_run")
