"""Deadlines: a slot's ack, and the deadlines it missed, on its tick row and in deadline_misses; a
notification's next attempt.

Revision ID: 0009
Revises: 0008

Written by hand against shardcron/store/schema.py; tests compare the two. Nullable columns only:
a tick written before this revision has no ack and missed nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from shardcron.store.migrations.revision_types import TABLE_OPTIONS, exact

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

COLUMNS = ("acked_at_ms", "start_deadline_missed_at_ms", "deadline_missed_at_ms", "heartbeat_missed_at_ms")


def upgrade() -> None:
    with op.batch_alter_table("ticks") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.BigInteger(), nullable=True))
    with op.batch_alter_table("notifications") as batch:
        batch.add_column(sa.Column("next_attempt_at_ms", sa.BigInteger(), nullable=True))
    op.create_table(
        "deadline_misses",
        sa.Column("job_id", exact(256), nullable=False),
        sa.Column("scheduled_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("namespace", exact(63), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("missed_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "scheduled_at_ms", "kind", name="pk_deadline_misses"),
        **TABLE_OPTIONS,
    )
    op.create_index("ix_deadline_misses_missed_at_ms", "deadline_misses", ["missed_at_ms"])


def downgrade() -> None:
    op.drop_index("ix_deadline_misses_missed_at_ms", table_name="deadline_misses")
    op.drop_table("deadline_misses")
    with op.batch_alter_table("notifications") as batch:
        batch.drop_column("next_attempt_at_ms")
    with op.batch_alter_table("ticks") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
