"""Retention horizons: per shard (--tick-retention, db prune) and per job (history_limit).

Revision ID: 0005
Revises: 0004

Written by hand against shardcron/store/schema.py; tests compare the two. Types
spelt out here, as in 0001, so later edits to schema.py cannot change this revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_OPTS = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_row_format": "DYNAMIC"}


def _exact(length: int) -> sa.types.TypeEngine:
    # Byte-for-byte comparison on every database (see schema.py).
    return (
        sa.String(length)
        .with_variant(sa.String(length, collation="C"), "postgresql")
        .with_variant(mysql.VARCHAR(length, charset="utf8mb4", collation="utf8mb4_nopad_bin"), "mysql", "mariadb")
    )


def upgrade() -> None:
    op.create_table(
        "shard_horizons",
        sa.Column("shard", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("horizon_ms", sa.BigInteger(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("shard", name="pk_shard_horizons"),
        **_OPTS,
    )
    op.create_table(
        "job_horizons",
        sa.Column("job_id", _exact(256), nullable=False),
        sa.Column("horizon_ms", sa.BigInteger(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_job_horizons"),
        **_OPTS,
    )


def downgrade() -> None:
    op.drop_table("job_horizons")
    op.drop_table("shard_horizons")
