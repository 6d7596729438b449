"""Failure notifications: one row per (job, slot, kind), claimed under the shard's fence, then sent.

Revision ID: 0006
Revises: 0005

Written by hand against shardcron/store/schema.py's ``notifications``; column types from revision_types.py (see 0001).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from shardcron.store.migrations.revision_types import TABLE_OPTIONS, exact, long_text

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("job_id", exact(256), nullable=False),
        sa.Column("scheduled_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("node_id", sa.String(256), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("spec", long_text(), nullable=False),
        sa.Column("claimed_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("sent_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", long_text(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", "scheduled_at_ms", "kind", name="pk_notifications"),
        **TABLE_OPTIONS,
    )
    op.create_index("ix_notifications_shard_status", "notifications", ["shard", "status"])
    op.create_index("ix_notifications_scheduled_at_ms", "notifications", ["scheduled_at_ms"])


def downgrade() -> None:
    op.drop_table("notifications")
