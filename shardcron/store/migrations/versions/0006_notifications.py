"""Failure notifications: one row per (job, slot, kind), claimed under the shard's fence, then sent.

Revision ID: 0006
Revises: 0005

Written by hand against shardcron/store/schema.py's ``notifications``; column types spelt out (see 0001).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_OPTS = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_row_format": "DYNAMIC"}


def _exact(length: int) -> sa.types.TypeEngine:
    return (
        sa.String(length)
        .with_variant(sa.String(length, collation="C"), "postgresql")
        .with_variant(mysql.VARCHAR(length, charset="utf8mb4", collation="utf8mb4_nopad_bin"), "mysql", "mariadb")
    )


def _long_text() -> sa.types.TypeEngine:
    return sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("job_id", _exact(256), nullable=False),
        sa.Column("scheduled_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("node_id", sa.String(256), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("spec", _long_text(), nullable=False),
        sa.Column("claimed_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("sent_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", _long_text(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", "scheduled_at_ms", "kind", name="pk_notifications"),
        **_OPTS,
    )
    op.create_index("ix_notifications_shard_status", "notifications", ["shard", "status"])
    op.create_index("ix_notifications_scheduled_at_ms", "notifications", ["scheduled_at_ms"])


def downgrade() -> None:
    op.drop_table("notifications")
