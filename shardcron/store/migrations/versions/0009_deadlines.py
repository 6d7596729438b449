"""Deadlines: a slot's ack, and the deadlines it missed, on its tick row; a notification's next attempt.

Revision ID: 0009
Revises: 0008

Written by hand against shardcron/store/schema.py; tests compare the two. Nullable columns only:
a tick written before this revision has no ack and missed nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

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


def downgrade() -> None:
    with op.batch_alter_table("notifications") as batch:
        batch.drop_column("next_attempt_at_ms")
    with op.batch_alter_table("ticks") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
