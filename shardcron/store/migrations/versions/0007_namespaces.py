"""Namespaces: every job belongs to one, and each namespace has a row of settings and usage.

Revision ID: 0007
Revises: 0006

A job's key (``jobs.id``, ``ticks.job_id``, ...) was already its identity in
``default``, and stays it: a job of another namespace is keyed
``namespace U+001F id`` (``spec.namespaces``), so no existing row changes and
no job moves shard. ``jobs.namespace`` holds the namespace again, so that listing
and counting one namespace's jobs reads an index instead of parsing keys.

``namespaces`` holds each namespace's weight and quotas, and its usage (job count,
sum of the jobs' peak rates as an exact fraction): the put path locks that row and
updates it in the put's transaction, so two leaders cannot both take a namespace's
last room. This revision creates ``default`` with the usage of the jobs there are.

Written by hand against shardcron/store/schema.py; tests compare the two.
"""

from __future__ import annotations

import time
from fractions import Fraction

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Connection

from shardcron.rules.quotas import job_rate
from shardcron.spec.job import job_from_json
from shardcron.store.migrations.revision_types import TABLE_OPTIONS, exact

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("namespace", exact(63), nullable=False, server_default="default"))
        batch.create_index("ix_jobs_namespace_id", ["namespace", "id"])
    op.create_table(
        "namespaces",
        sa.Column("name", exact(63), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("max_jobs", sa.BigInteger(), nullable=True),
        sa.Column("max_slots_per_second", sa.String(64), nullable=True),
        sa.Column("max_running", sa.BigInteger(), nullable=True),
        sa.Column("jobs", sa.BigInteger(), nullable=False),
        sa.Column("slots_per_second", sa.String(64), nullable=False),
        sa.Column("node_id", sa.String(256), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_namespaces"),
        **TABLE_OPTIONS,
    )
    jobs, rate = _default_usage(op.get_bind())
    now_ms = int(time.time() * 1000)
    op.get_bind().execute(
        sa.text(
            "INSERT INTO namespaces (name, weight, jobs, slots_per_second, node_id, created_at_ms, updated_at_ms) "
            "VALUES ('default', 1.0, :jobs, :rate, 'migration 0007', :now, :now)"
        ),
        {"jobs": jobs, "rate": str(rate), "now": now_ms},
    )


def _default_usage(conn: Connection) -> tuple[int, Fraction]:
    # The rule of rules.quotas.job_rate, read from each stored spec. A spec this
    # version cannot read counts 0 (the audit and the node report it on their own).
    count, rate = 0, Fraction(0)
    for (spec,) in conn.execute(sa.text("SELECT spec FROM jobs")):
        count += 1
        try:
            rate += job_rate(job_from_json(spec).schedule)
        except Exception:  # noqa: BLE001 - see above
            pass
    return count, rate


def downgrade() -> None:
    op.drop_table("namespaces")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_namespace_id")
        batch.drop_column("namespace")
