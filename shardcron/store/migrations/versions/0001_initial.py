"""The initial store: jobs, labels, ticks, shard fences, the fence log, cluster metadata.

Revision ID: 0001
Revises:

Written by hand against shardcron/store/schema.py as it stood for this
revision; tests compare the two. The column types are spelt out here rather than
imported, so that later edits to schema.py cannot change what this revision did.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
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


def _long_text() -> sa.types.TypeEngine:
    return sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def _huge_text() -> sa.types.TypeEngine:
    return sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", _exact(256), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("spec", _huge_text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("node_id", sa.String(256), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("active_since_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        **_OPTS,
    )
    op.create_index("ix_jobs_shard_id", "jobs", ["shard", "id"])

    op.create_table(
        "job_labels",
        sa.Column("job_id", _exact(256), nullable=False),
        sa.Column("key", _exact(256), nullable=False),
        sa.Column("value", _exact(256), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "key", name="pk_job_labels"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_job_labels_job_id_jobs", ondelete="CASCADE"),
        **_OPTS,
    )
    op.create_index("ix_job_labels_key_value", "job_labels", ["key", "value"])

    op.create_table(
        "ticks",
        sa.Column("job_id", _exact(256), nullable=False),
        sa.Column("scheduled_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("node_id", sa.String(256), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("manual", sa.Boolean(), nullable=False),
        sa.Column("claimed_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("started_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("finished_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("output", _long_text(), nullable=True),
        sa.Column("error", _long_text(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", "scheduled_at_ms", name="pk_ticks"),
        **_OPTS,
    )
    op.create_index("ix_ticks_shard_status", "ticks", ["shard", "status"])
    op.create_index(
        "ix_ticks_shard_manual_job_id_scheduled_at_ms", "ticks", ["shard", "manual", "job_id", "scheduled_at_ms"]
    )
    op.create_index("ix_ticks_scheduled_at_ms", "ticks", ["scheduled_at_ms"])

    op.create_table(
        "shard_fences",
        sa.Column("shard", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("node_id", sa.String(256), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("shard", name="pk_shard_fences"),
        **_OPTS,
    )

    op.create_table(
        "fence_log",
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("node_id", sa.String(256), nullable=False),
        sa.Column("raised_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("shard", "fence", name="pk_fence_log"),
        **_OPTS,
    )

    op.create_table(
        "cluster_meta",
        sa.Column("key", _exact(128), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_cluster_meta"),
        **_OPTS,
    )


def downgrade() -> None:
    for table in ("cluster_meta", "fence_log", "shard_fences", "ticks", "job_labels", "jobs"):
        op.drop_table(table)
