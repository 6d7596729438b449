"""Calendars (issue 14 item 1): the current definition of each named calendar, and every version with
the time it took effect, so that the audit judges each slot by the calendar in force then.

Revision ID: 0003
Revises: 0002

Written by hand against shardcron/store/schema.py as it stood for this revision; tests
compare the two.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from shardcron.store.migrations.revision_types import TABLE_OPTIONS, exact, long_text

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "calendars",
        sa.Column("name", exact(128), nullable=False),
        sa.Column("spec", long_text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.String(256), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_calendars"),
        **TABLE_OPTIONS,
    )
    op.create_table(
        "calendar_versions",
        sa.Column("name", exact(128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("spec", long_text(), nullable=True),
        sa.Column("effective_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", "version", name="pk_calendar_versions"),
        **TABLE_OPTIONS,
    )


def downgrade() -> None:
    op.drop_table("calendar_versions")
    op.drop_table("calendars")
