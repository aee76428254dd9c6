"""Callers own their runs: the principal of each session and run.

Rows written before principals existed belong to `default`, the principal of the single
ATTEST_AUTH_TOKEN (and of a gateway without authentication).

Revision ID: 0002_principals
Revises: 0001_initial
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_principals"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out here rather than imported from the models (see 0001_initial).
DEFAULT_PRINCIPAL = "default"
TABLES = ("diagnosis_session", "diagnosis_run")


def upgrade() -> None:
    # A NOT NULL column with a server default: existing rows get `default` on SQLite and
    # PostgreSQL alike, without rewriting the tables by hand.
    for table in TABLES:
        op.add_column(
            table,
            sa.Column("principal", sa.String(64), nullable=False, server_default=DEFAULT_PRINCIPAL),
        )


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("principal")
