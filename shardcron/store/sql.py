"""The few SQL idioms that differ between PostgreSQL, MariaDB and SQLite, and
batching helpers shared by the store modules."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Connection, Insert, Row, Table, false, or_, true
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import mysql, postgresql, sqlite

from shardcron.jobkey import DEFAULT_NAMESPACE, KEY_SEPARATOR

T = TypeVar("T")

# A result row of any columns, read by name.
AnyRow = Row[*tuple[Any, ...]]

# Rows or keys per statement. Keeps every statement far below the drivers'
# bound-parameter limits (SQLite 32766, PostgreSQL 65535) whatever the batch.
CHUNK = 500


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def insert_ignoring_duplicates(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert rows, silently keeping any row whose key already exists.

    For rows that are identical whoever inserts them (ensure_shards' fence-0
    rows): where the caller needs to know which rows it inserted, it must not
    use this (see ticks.claim_ticks).
    """
    if not rows:
        return
    name = conn.dialect.name
    stmt: Insert
    if name == "postgresql":
        stmt = postgresql.insert(table).on_conflict_do_nothing()
    elif name == "sqlite":
        stmt = sqlite.insert(table).on_conflict_do_nothing()
    else:
        # Not INSERT IGNORE: that would also turn other errors into warnings.
        first = table.primary_key.columns.values()[0]
        ins = mysql.insert(table)
        stmt = ins.on_duplicate_key_update({first.name: ins.inserted[first.name]})
    conn.execute(stmt, list(rows))


# PostgreSQL SQLSTATEs and MariaDB error numbers of a transaction that the
# server rolled back to break a cycle; running it again is the documented cure.
_PG_RETRYABLE = frozenset({"40P01", "40001"})  # deadlock_detected, serialization_failure
_MARIADB_RETRYABLE = frozenset({1213})  # ER_LOCK_DEADLOCK


def is_deadlock(e: BaseException | None) -> bool:
    """Whether ``e`` (a SQLAlchemy DBAPIError) is a deadlock the server broke."""
    orig = getattr(e, "orig", None)
    if orig is None:
        return False
    if getattr(orig, "sqlstate", None) in _PG_RETRYABLE:
        return True
    args: tuple[object, ...] = getattr(orig, "args", ())
    return bool(args) and args[0] in _MARIADB_RETRYABLE and isinstance(e, sa_exc.OperationalError)


def key_in_namespaces(key_column: ColumnElement[str], namespaces: Collection[str] | None) -> ColumnElement[bool]:
    """A condition on a column of job keys (``jobkey``): the key is in one of ``namespaces``
    (None: any). For tables that keep only the key (ticks, backfills); ``jobs`` has its own column.
    Namespace names hold no LIKE wildcard, so ``startswith`` needs no escaping."""
    if namespaces is None:
        return true()
    conditions = [
        ~key_column.contains(KEY_SEPARATOR, autoescape=False)
        if ns == DEFAULT_NAMESPACE
        else key_column.startswith(ns + KEY_SEPARATOR)
        for ns in sorted(namespaces)
    ]
    return or_(*conditions) if conditions else false()
