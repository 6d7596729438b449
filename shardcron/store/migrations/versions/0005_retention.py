"""Retention horizons: per shard (--tick-retention, db prune) and per job (history_limit).

Revision ID: 0005
Revises: 0004

Written by hand against shardcron/store/schema.py; tests compare the two. Types
from revision_types.py, as in 0001, so later edits to schema.py cannot change this revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from shardcron.store.migrations.revision_types import TABLE_OPTIONS, exact

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shard_horizons",
        sa.Column("shard", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("horizon_ms", sa.BigInteger(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("shard", name="pk_shard_horizons"),
        **TABLE_OPTIONS,
    )
    op.create_table(
        "job_horizons",
        sa.Column("job_id", exact(256), nullable=False),
        sa.Column("horizon_ms", sa.BigInteger(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_job_horizons"),
        **TABLE_OPTIONS,
    )


def downgrade() -> None:
    op.drop_table("job_horizons")
    op.drop_table("shard_horizons")
