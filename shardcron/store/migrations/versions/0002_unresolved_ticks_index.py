"""Ticks: a partial index of unresolved ticks, and no per-shard history index.

Revision ID: 0002
Revises: 0001

Every claimed tick paid for three secondary indexes on insert, and its result
for two of them again. Two of those served little:

* ``(shard, status)`` indexed every tick ever written by its status, while it
  is read only for the claimed and running ones (a new leader's orphans, a
  reshard's unfinished ticks). It becomes partial on SQLite and PostgreSQL: a
  tick is in it from its claim to its result. MariaDB has no partial indexes
  and keeps the full one.
* ``(shard, manual, job_id, scheduled_at_ms)`` was meant for ``last_ticks``,
  which selects by the job's current shard, not the tick's, so no database used
  it; ``last_ticks`` walks the primary key backwards per job instead.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# Spelt out, not imported: later edits to schema.py must not change this revision.
_UNRESOLVED = "status IN ('claimed', 'running')"


def upgrade() -> None:
    op.drop_index("ix_ticks_shard_manual_job_id_scheduled_at_ms", table_name="ticks")
    op.drop_index("ix_ticks_shard_status", table_name="ticks")
    op.create_index(
        "ix_ticks_unresolved",
        "ticks",
        ["shard", "status"],
        sqlite_where=sa.text(_UNRESOLVED),
        postgresql_where=sa.text(_UNRESOLVED),
    )


def downgrade() -> None:
    op.drop_index("ix_ticks_unresolved", table_name="ticks")
    op.create_index("ix_ticks_shard_status", "ticks", ["shard", "status"])
    op.create_index(
        "ix_ticks_shard_manual_job_id_scheduled_at_ms", "ticks", ["shard", "manual", "job_id", "scheduled_at_ms"]
    )
