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
from sqlalchemy.dialects import mysql

revision = "0003"
down_revision = "0002"
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
        "calendars",
        sa.Column("name", _exact(128), nullable=False),
        sa.Column("spec", _long_text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.String(256), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_calendars"),
        **_OPTS,
    )
    op.create_table(
        "calendar_versions",
        sa.Column("name", _exact(128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("spec", _long_text(), nullable=True),
        sa.Column("effective_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", "version", name="pk_calendar_versions"),
        **_OPTS,
    )


def downgrade() -> None:
    op.drop_table("calendar_versions")
    op.drop_table("calendars")
