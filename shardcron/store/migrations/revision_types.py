"""The column types and table options the revisions in ``versions/`` share.

A revision must create what it created when it was written, whatever schema.py
says later: so these are spelt out here rather than imported from schema.py,
and they never change. A revision that needs something else defines it itself
(or adds a new name here); it does not edit one of these.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

TABLE_OPTIONS: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_row_format": "DYNAMIC"}


def exact(length: int) -> sa.String:
    """Byte-for-byte comparison on every database (see schema.py)."""
    return (
        sa.String(length)
        .with_variant(sa.String(length, collation="C"), "postgresql")
        .with_variant(mysql.VARCHAR(length, charset="utf8mb4", collation="utf8mb4_nopad_bin"), "mysql", "mariadb")
    )


def long_text() -> sa.Text:
    return sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def huge_text() -> sa.Text:
    return sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


__all__ = ["TABLE_OPTIONS", "exact", "huge_text", "long_text"]
