"""Backfills: one row per ``shardcron jobs backfill`` request, its range, pace, cursor, state and counts.

Revision ID: 0004
Revises: 0003

Written by hand against shardcron/store/schema.py; tests compare the two.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from shardcron.store.migrations.revision_types import TABLE_OPTIONS, exact

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "backfills",
        sa.Column("id", exact(64), nullable=False),
        sa.Column("job_id", exact(256), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("from_ms", sa.BigInteger(), nullable=False),
        sa.Column("to_ms", sa.BigInteger(), nullable=False),
        sa.Column("overlap", sa.String(16), nullable=False),
        sa.Column("rate_per_s", sa.Float(), nullable=False),
        sa.Column("cursor_ms", sa.BigInteger(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("planned", sa.BigInteger(), nullable=False),
        sa.Column("done", sa.BigInteger(), nullable=False),
        sa.Column("skipped", sa.BigInteger(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("node_id", sa.String(256), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_backfills"),
        **TABLE_OPTIONS,
    )
    op.create_index("ix_backfills_shard_state", "backfills", ["shard", "state"])
    op.create_index("ix_backfills_job_id_from_ms", "backfills", ["job_id", "from_ms"])


def downgrade() -> None:
    op.drop_table("backfills")
