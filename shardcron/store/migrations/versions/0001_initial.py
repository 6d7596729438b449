"""The initial store: jobs, labels, ticks, shard fences, the fence log, cluster metadata.

Revision ID: 0001
Revises:

Written by hand against shardcron/store/schema.py as it stood for this
revision; tests compare the two. The column types come from revision_types.py,
never from schema.py, so that later edits to schema.py cannot change what this
revision did.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from shardcron.store.migrations.revision_types import TABLE_OPTIONS, exact, huge_text, long_text

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", exact(256), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("spec", huge_text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("node_id", sa.String(256), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("active_since_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        **TABLE_OPTIONS,
    )
    op.create_index("ix_jobs_shard_id", "jobs", ["shard", "id"])

    op.create_table(
        "job_labels",
        sa.Column("job_id", exact(256), nullable=False),
        sa.Column("key", exact(256), nullable=False),
        sa.Column("value", exact(256), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "key", name="pk_job_labels"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_job_labels_job_id_jobs", ondelete="CASCADE"),
        **TABLE_OPTIONS,
    )
    op.create_index("ix_job_labels_key_value", "job_labels", ["key", "value"])

    op.create_table(
        "ticks",
        sa.Column("job_id", exact(256), nullable=False),
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
        sa.Column("output", long_text(), nullable=True),
        sa.Column("error", long_text(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", "scheduled_at_ms", name="pk_ticks"),
        **TABLE_OPTIONS,
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
        **TABLE_OPTIONS,
    )

    op.create_table(
        "fence_log",
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("node_id", sa.String(256), nullable=False),
        sa.Column("raised_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("shard", "fence", name="pk_fence_log"),
        **TABLE_OPTIONS,
    )

    op.create_table(
        "cluster_meta",
        sa.Column("key", exact(128), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_cluster_meta"),
        **TABLE_OPTIONS,
    )


def downgrade() -> None:
    for table in ("cluster_meta", "fence_log", "shard_fences", "ticks", "job_labels", "jobs"):
        op.drop_table(table)
